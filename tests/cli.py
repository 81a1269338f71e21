"""The vmjudge command line as the tests run it: one way, always with a timeout, so a command
that hangs fails its test with a message instead of stalling the suite until CI gives up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Commands that boot VMs (a daemon may run a whole corpus under TCG) and those that do not.
VM_COMMANDS = {"daemon", "evaluate", "doctor", "image", "replica"}
VM_TIMEOUT = 2400
QUICK_TIMEOUT = 300


def run_cli(*args: str, home: Path | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None, text: bool = True, prefix: tuple[str, ...] = ()
            ) -> subprocess.CompletedProcess:
    """`python -m vmjudge.cli ARGS` from the repository, with VMJUDGE_HOME=home if given;
    `prefix` runs it under another command (`taskset -c 0`)."""
    if timeout is None:
        timeout = VM_TIMEOUT if VM_COMMANDS & set(args) else QUICK_TIMEOUT
    full_env = {**os.environ, **({"VMJUDGE_HOME": str(home)} if home is not None else {}), **(env or {})}
    return subprocess.run([*prefix, sys.executable, "-m", "vmjudge.cli", *args], capture_output=True, text=text,
                          env=full_env, cwd=REPO, timeout=timeout)
