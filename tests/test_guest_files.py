"""The agent's files as the image ships them: all of them, importable side by side with the
standard library alone, and the run guard shared with the replica rather than copied."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from vmjudge.images import build
from vmjudge.images.guest import run_guard
from vmjudge.replica import local

GUEST = Path(build.GUEST_DIR)


def test_every_guest_module_is_shipped():
    modules = {p.name for p in GUEST.glob("*.py")} - {"__init__.py"}
    assert modules <= set(build.GUEST_FILES)
    assert "init" in build.GUEST_FILES


def test_no_guest_module_hides_a_standard_module():
    """/opt/vmjudge comes first on the guest's sys.path: a module named like one of the
    standard library's would be imported in its place, by the agent and the library alike."""
    names = {name.removesuffix(".py") for name in build.GUEST_FILES if name.endswith(".py")}
    assert not names & sys.stdlib_module_names


def test_shipped_files_import_with_the_standard_library_alone(tmp_path):
    """As in the guest: the files alone in one directory, -I -S (no site-packages, no vmjudge)."""
    for name in build.GUEST_FILES:
        shutil.copyfile(GUEST / name, tmp_path / name)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import agent; "
            "print(agent.AGENT_VERSION, 'vmjudge' in sys.modules)")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [build.agent_version(), "False"]


def test_the_replica_ends_entry_processes_with_the_agents_run_guard():
    assert local.kill_user is run_guard.kill_user
