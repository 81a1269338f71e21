"""Archives and stage-3 results for hosts that share no files: in the queue's database, or in an
S3-compatible object store when site.toml has [storage] url.

With several hosts, an entry is submitted on one, prepared on another and scored on a third:
its archive and its results travel content-addressed like the spool and the results store, and
each host keeps a local copy in those same places. Without a store they travel in PostgreSQL, in
parts of one MiB, so neither end ever holds a whole archive in memory, and the row in `blobs` is
written last: a blob listed there is whole. With a store (object_store.py) the bytes go to the
bucket, streamed from the file, and the database keeps only the row, written once the object is
there: `parts` 0 for a blob of some size says it lives in the store (rows written in parts before a
store was set up are still read from the database). Each host's copies are then bounded
(blob_cache.py): one removed is fetched again when next asked for. A copy fetched either way is
checked against its sha256 before it is renamed into place, so a damaged part or object is refused
rather than unpacked or scored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import InfrastructureError, VmjudgeError
from ..files import DurableFile
from .blob_cache import BlobCache
from .connection import Database, Db
from .rows import now

PART = 1 << 20


class Store(Protocol):
    """An object store of blobs (object_store.py, which boto3 speaks through: made by the command line and the
    portal, so that what imports the queue, the replica among them, needs no boto3)."""

    where: str

    def key(self, sha256: str) -> str: ...

    def put(self, sha256: str, path: Path, again: bool = False) -> bool: ...

    def get(self, sha256: str, size: int, out: DurableFile) -> None: ...


@dataclass(frozen=True)
class Stored:
    """Blobs kept in an object store, and this host's bounded copies of them."""

    store: Store
    cache: BlobCache


class Blobs:
    def __init__(self, database: Database, stored: Stored | None = None):
        """The blobs of `database`'s queue, in the object store of `stored` if there is one."""
        self.database = database
        self.store: Store | None = stored.store if stored is not None else None
        self.cache: BlobCache | None = stored.cache if stored is not None else None

    def put_file(self, db: Db, sha256: str, path: Path) -> None:
        """Store the file (whose sha256 the caller computed when it stored it) within `db`'s
        transaction, unless the database has it already. With a store, the object is there before
        the row is written, and the file becomes one of this host's bounded copies."""
        listed = db.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (sha256,)).fetchone() is not None
        if self.store is None:
            if not listed:
                self._put_parts(db, sha256, path)
            return
        if not listed:
            size = Path(path).stat().st_size
            self.store.put(sha256, path)
            db.execute("INSERT INTO blobs (sha256, size, parts, added_at) VALUES (?, ?, 0, ?) "
                       "ON CONFLICT(sha256) DO NOTHING", (sha256, size, now()))
        self._keep(sha256, Path(path))

    def _put_parts(self, db: Db, sha256: str, path: Path) -> None:
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
        fetched unless it is there already. VmjudgeError when the database lacks it or its bytes
        are damaged; InfrastructureError when the store cannot give it."""
        if self._here(sha256, path):
            return path
        with self.database.connect() as db:
            row = db.execute("SELECT size, parts FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
        if row is None:
            raise VmjudgeError(f"the queue database has no blob {sha256[:12]}: it was never stored by the "
                               "host that accepted it; run the entry again (`vmjudge rescore --rerun-stages`).")
        size, parts = int(row["size"]), int(row["parts"])
        with DurableFile(path.parent, prefix=f".{sha256}.", suffix=".part") as out:
            if parts == 0 and size > 0:
                self._from_store(sha256, size, out)
            else:
                self._from_parts(sha256, parts, out)
            if out.sha256 != sha256:
                raise self._damaged(sha256, in_store=parts == 0 and size > 0)
            if self.cache is None:
                out.commit(path)
            else:
                with self.cache.locked():
                    out.commit(path)
                    self.cache.note(sha256, path)
        if self.cache is not None:
            self.cache.trim()
        return path

    def _here(self, sha256: str, path: Path) -> bool:
        """Whether this host has its copy; with a store, the copy is touched as used, under the
        cache's lock, so that no trim removes it as it is handed out."""
        if self.cache is None:
            return path.is_file()
        with self.cache.locked():
            if not path.is_file():
                return False
            self.cache.note(sha256, path)
        return True

    def _keep(self, sha256: str, path: Path) -> None:
        if self.cache is not None:
            with self.cache.locked():
                self.cache.note(sha256, path)
            self.cache.trim()

    def _from_parts(self, sha256: str, parts: int, out: DurableFile) -> None:
        with self.database.connect() as db:
            for part in range(parts):
                data = db.execute("SELECT data FROM blob_parts WHERE sha256 = ? AND part = ?",
                                  (sha256, part)).fetchone()
                out.write(bytes(data["data"]) if data is not None else b"")

    def _from_store(self, sha256: str, size: int, out: DurableFile) -> None:
        if self.store is None:
            raise VmjudgeError(f"the blob {sha256[:12]} is kept in the object store, but this host's site.toml has "
                               "no [storage] url: give every host sharing the queue the same [storage] table.")
        self.store.get(sha256, size, out)

    def _damaged(self, sha256: str, in_store: bool) -> VmjudgeError:
        if not in_store:
            return VmjudgeError(f"the blob {sha256[:12]} in the queue database is damaged (its sha256 no "
                                "longer matches): restore the database from a backup.")
        where = self.store.where if self.store is not None else "the object store"
        key = self.store.key(sha256) if self.store is not None else sha256
        return InfrastructureError("store-damaged", (
            f"the copy of blob {sha256[:12]} in the object store {where} is damaged (its sha256 no longer "
            f"matches), so it was refused: copy the good file (named by its sha256 in the spool or "
            f"HOME/archive/sha256 of a host that has it) over the object {key}."))
