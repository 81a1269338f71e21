"""Archives and stage-3 results kept in the queue's database, for hosts that share no files.

With several hosts, an entry is submitted on one, prepared on another and scored on a third:
its archive and its results travel in PostgreSQL, content-addressed like the spool and the
results store, and each host keeps a local copy in those same places. A blob is written in
parts of one MiB, so neither end ever holds a whole archive in memory, and its row in `blobs`
is written last: a blob listed there is whole. A copy fetched is checked against its sha256
before it is renamed into place, so a damaged part is refused rather than unpacked or scored.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import VmjudgeError
from ..files import DurableFile
from .connection import Database, Db
from .rows import now

PART = 1 << 20


class Blobs:
    def __init__(self, database: Database):
        self.database = database

    def put_file(self, db: Db, sha256: str, path: Path) -> None:
        """Store the file (whose sha256 the caller computed when it stored it) within `db`'s
        transaction, unless the database has it already."""
        if db.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (sha256,)).fetchone() is not None:
            return
        size = 0
        with open(path, "rb") as f:
            part = 0
            while data := f.read(PART):
                db.execute("INSERT INTO blob_parts (sha256, part, data) VALUES (?, ?, ?) "
                           "ON CONFLICT(sha256, part) DO NOTHING", (sha256, part, data))
                size += len(data)
                part += 1
        db.execute("INSERT INTO blobs (sha256, size, parts, added_at) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT(sha256) DO NOTHING", (sha256, size, math.ceil(size / PART), now()))

    def put(self, sha256: str, path: Path) -> None:
        with self.database.transaction() as db:
            self.put_file(db, sha256, path)

    def has(self, sha256: str) -> bool:
        with self.database.connect() as db:
            return db.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (sha256,)).fetchone() is not None

    def fetch(self, sha256: str, path: Path) -> Path:
        """This host's copy of the blob at `path` (mode 0600; its directory made by the caller),
        fetched part by part unless it is there already. VmjudgeError when the database lacks
        it or its bytes are damaged."""
        if path.is_file():
            return path
        with self.database.connect() as db:
            row = db.execute("SELECT parts FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
            if row is None:
                raise VmjudgeError(f"the queue database has no blob {sha256[:12]}: it was never stored by the "
                                   "host that accepted it; run the entry again (`vmjudge rescore --rerun-stages`).")
            with DurableFile(path.parent, prefix=f".{sha256}.", suffix=".part") as out:
                for part in range(int(row["parts"])):
                    data = db.execute("SELECT data FROM blob_parts WHERE sha256 = ? AND part = ?",
                                      (sha256, part)).fetchone()
                    out.write(bytes(data["data"]) if data is not None else b"")
                if out.sha256 != sha256:
                    raise VmjudgeError(f"the blob {sha256[:12]} in the queue database is damaged (its sha256 no "
                                       "longer matches): restore the database from a backup.")
                out.commit(path)
        return path
