"""Opening the queue's SQLite database: made private before SQLite first opens it, its tables
made or brought up to date, then one connection per operation (WAL, full sync, foreign keys)
and one short IMMEDIATE transaction per change of state."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import private
from ..errors import VmjudgeError
from .schema import MIGRATIONS, SCHEMA


def create(path: Path) -> None:
    """The database at `path`, its tables made or (a queue made by an older vmjudge) migrated."""
    try:
        _make_private(path)
        with connect(path) as db:
            db.executescript(SCHEMA)
            for table, column, definition in MIGRATIONS:
                columns = {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}
                if column not in columns:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
    except (sqlite3.Error, OSError) as exc:
        raise VmjudgeError(f"cannot open the queue database {path}: {exc}; "
                           "check the home directory.") from exc


def _make_private(path: Path) -> None:
    """The queue holds every entry's messages and scores: 0600. SQLite gives the -wal and
    -shm files it makes the database file's mode, so the file is made before SQLite opens
    it; those of a queue made by an older vmjudge are fixed."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, private.FILE))
    for suffix in ("", "-wal", "-shm"):
        private.restrict(path.with_name(path.name + suffix))


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA foreign_keys=ON")
    try:
        yield db
    finally:
        db.close()


@contextmanager
def transaction(path: Path) -> Iterator[sqlite3.Connection]:
    with connect(path) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
