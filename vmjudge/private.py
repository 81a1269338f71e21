"""Files and directories of the home that only the judge may read.

Exam logs, reports and archived results are channels to the test labels, and the spool and
the unpacked entries hold participants' code: no other local user may read them, whatever
paths they guess. Files are created 0600 (never made first and restricted after, so they
are not readable for a moment), directories 0700, or 0711 where libvirt's qemu user must
cross them on the way to a VM's disk (see config/layout.py): crossing lets no one list them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import BinaryIO

FILE = 0o600
DIR = 0o700
CROSSABLE_DIR = 0o711  # libvirt's qemu opens a disk below; no one may list what is here

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def make_dir(path: Path, mode: int = DIR) -> Path:
    """`path` (and any missing parents) made, with exactly `mode`; an existing one is fixed."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    return path


def fresh_dir(path: Path) -> Path:
    """An empty private directory at `path`, whatever was there before."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(mode=DIR)
    os.chmod(path, DIR)  # mkdir's mode is filtered by the umask
    return path


def create(path: Path) -> BinaryIO:
    """`path` opened for writing from empty, readable by the judge alone. A file made before
    keeps its mode under O_CREAT, so the mode is set again."""
    fd = os.open(path, _CREATE, FILE)
    try:
        os.fchmod(fd, FILE)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


def write_text(path: Path, text: str) -> Path:
    with create(path) as f:
        f.write(text.encode("utf-8"))
    return Path(path)


def restrict(path: Path) -> None:
    """An existing file (made by an older vmjudge, or by another program) made private."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(path, FILE)
