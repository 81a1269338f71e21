"""The entry spool: submitted archives stored by content, durably, before the queue row.

An accepted entry must never be lost, so `Spool.store` writes the archive to a temporary
file beside its final place, fsyncs it, renames it into place and fsyncs the directory:
after `store` returns, the archive survives a crash or power cut. The file name is the
archive's sha256, so storing the same archive twice is harmless and a stored archive can be
checked against the manifest that names it. Nothing partial is ever left under a final name.

Only an archive that is properly named (vmjudge.archive.names) is stored, and the stored
file keeps its kind in its name; what the archive holds is checked by vmjudge.archive.checks.

Storing is two steps, so that admission can check an archive without holding its lock: `stage`
copies it (fsynced) under a name of its own in the spool's incoming/ directory, which only the
judge writes, so the staged bytes are the bytes checked and then placed; `place` renames it to
its content address, or drops it when the same bytes are already there. `store` does both. A
staged copy is removed by whoever staged it; one that a crash left behind is removed by the
next `stage` once it is a day old (no admission takes that long).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .. import private
from ..archive.names import stored_format
from ..errors import VmjudgeError
from ..files import CHUNK, DurableFile, fsync_dir
from .blobs import Blobs

MARGIN = 64 << 20  # free space kept beyond the archive, so the spool never fills its disk
STALE = 24 * 3600  # seconds after which a staged copy can only be a crash's leftover
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class StoredArchive:
    """An archive safely in the spool: its content hash, where it lies, its size and the
    name the participant gave it (e.g. "alice-entry.tar.gz")."""

    sha256: str
    path: Path
    size: int
    name: str
    # Whether this store() put the file there; False when the same bytes were already stored,
    # perhaps for another entry, so that a refusal removes only what it added.
    new: bool = field(default=False, compare=False)

    @property
    def kind(self) -> str:
        return stored_format(self.name)




@dataclass(frozen=True)
class StagedArchive:
    """An archive copied into the spool's incoming/ directory, not yet under its content address."""

    sha256: str
    path: Path
    size: int
    name: str


def _mib(n: int) -> int:
    return math.ceil(n / (1 << 20))


class Spool:
    """Content-addressed archive store under `root`: root/<sha[:2]>/<sha>.<zip|tar.gz|image.tar|image.tar.gz>."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path_for(self, sha256: str, name: str) -> Path:
        """Where the archive with this hash and (participant's) file name is stored."""
        if not _SHA256.fullmatch(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.root / sha256[:2] / f"{sha256}.{stored_format(name)}"

    def exists(self, sha256: str, name: str) -> bool:
        return self.path_for(sha256, name).is_file()

    def open(self, stored: StoredArchive) -> BinaryIO:
        """Open a stored archive for reading."""
        return open(stored.path, "rb")

    @property
    def incoming(self) -> Path:
        """Where archives are staged, each under a name of its own, before they are placed."""
        return self.root / "incoming"

    def store(self, source: Path) -> StoredArchive:
        """Copy `source` into the spool durably and return where it is; idempotent.

        Raises EntryError for a badly named archive and VmjudgeError when the spool has
        too little room or the copy fails; in either case no file is left behind.
        """
        return self.place(self.stage(source))

    def stage(self, source: Path) -> StagedArchive:
        """A durable copy of `source` in incoming/, under a name no other submission has; the
        caller places it or discards it. Raises as store() does, leaving nothing behind."""
        source = Path(source)
        name = source.name
        stored_format(name)
        try:
            size = source.stat().st_size
        except OSError as exc:
            raise VmjudgeError(f"cannot read {source} ({exc.strerror or exc}): check the path and "
                               "submit again.") from exc
        created = []
        for d in (self.root, self.incoming):  # participants' code: no one else may enter (0700)
            if not d.is_dir():
                private.make_dir(d)
                created.append(d)
        self._sweep()
        free = shutil.disk_usage(self.root).free
        if size + MARGIN > free:
            raise VmjudgeError(f"the spool at {self.root} has {free >> 20} MB free, not enough for this "
                               f"{_mib(size)} MB archive: free some space and submit again.")
        staged = self.incoming / f"{secrets.token_hex(16)}.{stored_format(name)}"
        try:
            out = DurableFile(self.incoming, prefix=f".{staged.name}.", suffix=".part")  # mode 0600
            with out, open(source, "rb") as src:
                copied = 0
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                    copied += len(chunk)
                out.commit(staged, sync_dir=False)  # place() syncs the directory it lands in
            for d in created:
                fsync_dir(d.parent)
        except OSError as exc:
            staged.unlink(missing_ok=True)
            raise VmjudgeError(f"could not store {name} in the spool at {self.root} "
                               f"({exc.strerror or exc}): free some space or fix the disk and submit "
                               "again.") from exc
        return StagedArchive(out.sha256, staged, copied, name)

    def _sweep(self) -> None:
        """Remove staged copies a crash left in incoming/ (older than STALE)."""
        old = time.time() - STALE
        for path in self.incoming.iterdir():
            try:
                if path.stat().st_mtime < old:
                    path.unlink()
            except FileNotFoundError:
                continue  # another submission's, removed as we looked

    def place(self, staged: StagedArchive) -> StoredArchive:
        """Put a staged archive under its content address (durably), or drop it when the same
        bytes are already there; `new` says which. Under the admission lock: then a refusal may
        take back what it placed, as no other entry can have come to share it."""
        final = self.path_for(staged.sha256, staged.name)
        moved = False
        try:
            if final.is_file() and final.stat().st_size == staged.size:
                staged.path.unlink()
                return StoredArchive(staged.sha256, final, staged.size, staged.name, new=False)
            made = not final.parent.is_dir()
            if made:
                private.make_dir(final.parent)
            os.replace(staged.path, final)
            moved = True
            fsync_dir(final.parent)
            if made:
                fsync_dir(final.parent.parent)
        except OSError as exc:
            staged.path.unlink(missing_ok=True)
            if moved:  # not known to be on disk: no entry may name it
                final.unlink(missing_ok=True)
            raise VmjudgeError(f"could not store {staged.name} in the spool at {self.root} "
                               f"({exc.strerror or exc}): free some space or fix the disk and submit "
                               "again.") from exc
        return StoredArchive(staged.sha256, final, staged.size, staged.name, new=True)

    def discard(self, staged: StagedArchive) -> None:
        """Remove a staged archive that was not placed (refused, or its checks failed)."""
        staged.path.unlink(missing_ok=True)

    def local_copy(self, blobs: Blobs, sha256: str, name: str) -> Path:
        """This host's copy of an archive another host accepted (several hosts): fetched from
        the queue's database into the spool, checked against its sha256, unless already here."""
        final = self.path_for(sha256, name)
        for d in (self.root, final.parent):
            if not d.is_dir():
                private.make_dir(d)
        return blobs.fetch(sha256, final)

    def remove(self, stored: StoredArchive) -> None:
        """Take back an archive that this submission stored and then refused. Only for one that
        `store` reported as new, while the caller still holds the admission lock: then no entry
        can have come to share it."""
        if not stored.new:
            raise ValueError(f"{stored.path} was in the spool before this submission: it may be another entry's.")
        stored.path.unlink(missing_ok=True)
        fsync_dir(stored.path.parent)
