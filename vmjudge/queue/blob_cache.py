"""This host's copies of the blobs the object store keeps, bounded: the least recently used go
first once they take more than [storage] cache_gib.

The copies stay where the judge has always kept them (an archive in the spool, stage 3's results in
HOME/archive/sha256), so nothing that reads them changes; this module keeps a note of each, one
small file per blob under HOME/blob-cache (ab/<sha256>) that lists where its copies are and whose
modification time is the blob's last use. A copy is noted when it is stored or fetched and touched
whenever it is asked for again; removing one is safe because the store keeps the blob and every
reader asks for its copy through Blobs.fetch, which fetches it again when it is gone.

A copy in use is never removed: one used within `grace` seconds (an hour) is kept even above the
bound, since its reader took it from Blobs.fetch moments before, and a file a reader has opened is
not taken from it by its removal. Notes, touches and removals happen under one lock file, so a fetch
never hands out a copy that a trim (in another process) is removing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import private

GRACE = 3600.0  # seconds a copy is kept after its last use, whatever the bound


@dataclass(frozen=True)
class Noted:
    """One blob's copies on this host, and when it was last used."""

    sha256: str
    note: Path
    paths: tuple[Path, ...]
    size: int
    used: float


class BlobCache:
    def __init__(self, directory: Path, bound: int, grace: float = GRACE,
                 clock: Callable[[], float] = time.time):
        """`bound` bytes of copies at most, beyond those used in the last `grace` seconds;
        `clock` gives the time of a use (tests move it by hand)."""
        self.directory, self.bound, self.grace, self.clock = Path(directory), bound, grace, clock

    @contextmanager
    def locked(self) -> Iterator[None]:
        """This host's one writer of the notes and remover of copies, across processes."""
        private.make_dir(self.directory)
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, private.FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def note(self, sha256: str, path: Path) -> None:
        """Under locked(): `path` holds the blob, and it is used now."""
        note, path = self.directory / sha256[:2] / sha256, Path(path).absolute()
        paths = self._paths(note)
        if path not in paths:
            private.make_dir(note.parent)
            private.write_text(note, "".join(f"{p}\n" for p in (*paths, path)))
        now = self.clock()
        os.utime(note, (now, now))

    def trim(self, bound: int | None = None) -> list[Path]:
        """Copies removed, least recently used first, until those kept take no more than the
        bound (`bound`, else the cache's: `vmjudge gc` gives 0, every copy the store keeps that no one
        used within the grace); none used within the grace period. Notes whose copies are all gone are
        dropped."""
        removed: list[Path] = []
        bound = self.bound if bound is None else bound
        with self.locked():
            kept = self._kept()
            total = sum(n.size for n in kept)
            fresh = self.clock() - self.grace
            for noted in sorted(kept, key=lambda n: n.used):
                if total <= bound or noted.used > fresh:
                    break
                for path in noted.paths:
                    path.unlink(missing_ok=True)
                    removed.append(path)
                noted.note.unlink(missing_ok=True)
                total -= noted.size
        return removed

    def kept(self) -> tuple[int, int]:
        """How many blobs this host keeps copies of, and their bytes (for `vmjudge status`)."""
        with self.locked():
            kept = self._kept()
        return len(kept), sum(n.size for n in kept)

    def _kept(self) -> list[Noted]:
        found = []
        for note in self.directory.glob("??/*"):
            sha256 = note.name
            # Only a file named by its blob's sha256 (as the spool and the results store name theirs)
            # is ever removed, whatever a damaged note says.
            paths = tuple(p for p in self._paths(note) if sha256 in p.name and p.is_file())
            if not paths:  # removed by someone else (gc, an admission taken back): nothing to keep
                note.unlink(missing_ok=True)
                continue
            with contextlib.suppress(FileNotFoundError):
                found.append(Noted(sha256, note, paths, sum(p.stat().st_size for p in paths), note.stat().st_mtime))
        return found

    @staticmethod
    def _paths(note: Path) -> tuple[Path, ...]:
        try:
            return tuple(Path(line) for line in note.read_text().splitlines() if line.startswith("/"))
        except FileNotFoundError:
            return ()
