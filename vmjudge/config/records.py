"""A record set's RECORDS file: one record name per line, each usable as a file name prefix.

The training set, the test set and each contest phase's own test set are read by the same
rules, so a name refused in one is refused in all.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ConfigError

RECORD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def read_records(directory: Path) -> tuple[str, ...]:
    """RECORDS of `directory` (empty when it is absent; `challenge add` insists on it)."""
    path = directory / "RECORDS"
    if not path.exists():
        return ()
    names = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    for name in names:
        if not RECORD_RE.fullmatch(name):
            raise ConfigError(f"{path} lists {name!r}, which is not a usable record name: use letters, digits, "
                              "'_' and '-'.")
    if len(set(names)) != len(names):
        raise ConfigError(f"{path} lists a record twice: each record must appear once.")
    return tuple(names)


def record_files(directory: Path, record: str) -> list[Path]:
    """The files of one record (RECORD.*) in `directory`."""
    return sorted(p for p in directory.glob(f"{record}.*") if p.is_file())


def socket_record_files(directory: Path, record: str) -> list[Path]:
    """The files of one record of a challenge with sockets: every regular file under RECORD/
    (no link followed), which the case's /input holds at the same relative paths."""
    top = directory / record
    if not top.is_dir() or top.is_symlink():
        return []
    return sorted(p for p in top.rglob("*") if p.is_file() and not p.is_symlink())
