"""sigstat (examples/alarms2015/image/sigstat) built on the host, as the challenge's image builds
it in the guest: the same source, `make` and `make install`. The tests that run alarms2015's
entries put it on PATH, and tests/test_sigstat.py pins what it prints."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "examples" / "alarms2015" / "image" / "sigstat"
# Warnings are errors here: the tool must build cleanly as plain C99.
STRICT_CFLAGS = "-O2 -Wall -Wextra -Werror"


def build_sigstat(into: Path) -> Path:
    """Builds a copy of the source in `into` (never in examples/, which must hold no build
    output) and installs it with PREFIX=into/prefix; returns the bin directory holding it."""
    src = into / "src"
    shutil.copytree(SOURCE, src)
    for target in ([], ["install", f"PREFIX={into / 'prefix'}"]):
        done = subprocess.run(["make", "-C", str(src), f"CFLAGS={STRICT_CFLAGS}", *target],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (into / "prefix" / "bin" / "sigstat").is_file()
    return into / "prefix" / "bin"
