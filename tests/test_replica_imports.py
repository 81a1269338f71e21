"""The replica ISO runs vmjudge's own stage code on the guest's Python, which has only the
standard library (and the challenge's packages): no pycdlib, libvirt, pyserial or click.
A module on its path that imports one of them stops `vmjudge-replica check` at once, which
only the slow replica boot test would otherwise show (as a console timeout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REPLICA_MODULES = ("vmjudge.replica.check", "vmjudge.replica.local", "vmjudge.stages.prep.stage",
                   "vmjudge.stages.quiz.stage", "vmjudge.stages.score", "vmjudge.evaluate")


def test_the_replicas_code_imports_with_the_standard_library_alone():
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); " + "; ".join(f"import {m}" for m in REPLICA_MODULES)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
