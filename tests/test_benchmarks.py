"""Every benchmark under bench/ starts: `python bench/X.py --help` from the repository, as a
developer runs it, exits 0 with its usage. Run as its own process, because that is where a
script's directory comes first on sys.path (a bench/queue.py once hid the standard library's
`queue` from every script there), and with the host's lock held by this test, so a benchmark
that takes the host before parsing its options fails here (--help must never wait for VMs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .host_lock import LOCK_ENV, exclusive_host

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {p.name: 'if __name__ == "__main__":' in p.read_text() for p in (REPO / "bench").glob("*.py")}
BENCHMARKS = sorted(name for name, runs in SCRIPTS.items() if runs)


def test_every_file_but_the_shared_helpers_is_a_benchmark():
    """So that a benchmark that lost its entry point is not left out of the test below unseen."""
    assert sorted(name for name, runs in SCRIPTS.items() if not runs) == ["image_bench.py"]
    assert "rescore.py" in BENCHMARKS and "queue_bench.py" in BENCHMARKS


@pytest.mark.parametrize("script", BENCHMARKS)
def test_help_starts_without_the_host(script, tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "host.lock"))  # this test's own lock, which the child also reads
    with exclusive_host("the benchmark test"):
        proc = subprocess.run([sys.executable, f"bench/{script}", "--help"], cwd=REPO, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {script} "), proc.stdout
