"""Data disks kept in the object store, for hosts that share no files (#57).

A data disk (images/data_disk.py) is named by its record set's content. The host that makes one
first sends it to the store, as a blob named by its own sha256, and lists it here by the set's key;
a host that needs that set's disk and has none fetches it instead of making it, and checks it
against the listed sha256 before it is used, so a damaged object is refused. Every host then
lends its entries the same bytes.

The store is a shortcut here, never a condition: every host that judges a challenge holds its files
(the fingerprint check), so a store that is down or an object that is damaged costs the host only the
making of the disk from them (data_disk.py says so in the log), and a stage never fails for it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InfrastructureError
from ..files import DurableFile, sha256_file
from .blobs import Blobs, Store
from .connection import Database
from .rows import now


class SharedDisks:
    """The data disks of `database`'s queue kept in `store`."""

    def __init__(self, database: Database, store: Store):
        self.database, self.store = database, store
        self.refused: set[str] = set()  # sets whose object was damaged: the disk made here is sent over it

    def fetch(self, key: str, out: DurableFile) -> bool:
        """The disk of the set `key` written to `out` from the store, checked: False when no host has
        sent it. InfrastructureError when the store cannot give it or gives other bytes."""
        with self.database.connect() as db:
            row = db.execute("SELECT sha256, size FROM data_disks WHERE key = ?", (key,)).fetchone()
        if row is None:
            return False
        sha256 = row["sha256"]
        self.store.get(sha256, int(row["size"]), out)
        if out.sha256 != sha256:
            self.refused.add(key)
            raise InfrastructureError("store-damaged", (
                f"the data disk {key[:12]} in the object store {self.store.where} is damaged (its sha256 no longer "
                f"matches {sha256[:12]}), so it was refused: this host makes it from the challenge's files and sends "
                f"it over the object {self.store.key(sha256)}."))
        return True

    def keep(self, key: str, path: Path) -> None:
        """The disk just made for the set `key` sent to the store and listed (the object first), in place
        of any listed before; sent over the object this host found damaged (the disk's bytes are the
        same whoever makes it: iso.py writes no time), which repairs it."""
        sha256 = sha256_file(path)
        self.store.put(sha256, path, again=key in self.refused)
        self.refused.discard(key)
        with self.database.transaction() as db:
            db.execute("INSERT INTO data_disks (key, sha256, size, added_at) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT(key) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size, "
                       "added_at = excluded.added_at", (key, sha256, Path(path).stat().st_size, now()))


def shared_disks(blobs: Blobs) -> SharedDisks | None:
    """The data disks of a queue's object store; None without one (they are then each host's own)."""
    return SharedDisks(blobs.database, blobs.store) if blobs.store is not None else None
