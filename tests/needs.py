"""A test that cannot run here (not root, a tool missing) skips on a developer's machine, and
fails under CI (CI=true, as .ci/run sets it): CI runs as root with `make setup`'s tools, so a
skip there would be a broken setup passing in silence."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest


def cannot_run(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}, which CI must have (CI=true)", pytrace=False)
    pytest.skip(reason)


def root_making_tools() -> None:
    """Making an entry's root (images/entry_root.py) keeps the image's owners, so root, and the
    tools `make setup` installs."""
    if os.geteuid() != 0:
        cannot_run("making an entry's root keeps the image's owners, which needs root")
    for tool in ("skopeo", "umoci", "mksquashfs", "unsquashfs"):
        if shutil.which(tool) is None:
            cannot_run(f"{tool} is not installed (make setup installs it)")


def guest_script_as_root(script: str, guest_dir: Path, work: Path, why_root: str) -> Any:
    """`script` run as the guest's agent runs its code (python3 -I -S, the guest's directory as its
    first argument, `work` its second), as root; what it printed, as JSON."""
    if os.geteuid() != 0:
        cannot_run(why_root)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", script, str(guest_dir), str(work)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
