"""Writing a file so that a crash never leaves half of it under its name, and hashing files.

The spool, the results store and the leaderboard all replace a file whole: the bytes go to a
temporary file beside the final one (same directory, so the rename cannot cross file
systems), are fsynced, and only then renamed into place; the directory is fsynced too where
the rename itself must survive a power cut. The content-addressed stores name a file by the
sha256 of what was written, so the writer hashes as it goes and the name can be chosen last.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Self

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read a chunk at a time (images and archives are large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def stat_signature(path: Path) -> list[int]:
    """Inode, size, mtime and ctime: unchanged, the file's content was not replaced or written
    (ctime cannot be set back by hand), so a hash that passed against it need not be taken again."""
    st = Path(path).stat()
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def fsync_dir(path: Path) -> None:
    """Make a rename, creation or removal in directory `path` survive a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DurableFile:
    """A temporary file in `directory` that becomes a final file only through `commit`.

    Used as a context manager: leaving it without a commit (an error, or content that is
    already stored) removes the temporary file, so nothing partial is ever left. The file is
    created with exactly `mode` (0600 unless given: most of what the judge writes is private),
    so it is never readable by others even for a moment.
    """

    def __init__(self, directory: Path, prefix: str, suffix: str, mode: int = 0o600):
        fd, name = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
        self.temp = Path(name)
        try:
            os.fchmod(fd, mode)
            self._file = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            self.temp.unlink(missing_ok=True)
            raise
        self._digest = hashlib.sha256()

    def write(self, chunk: bytes) -> None:
        self._digest.update(chunk)
        self._file.write(chunk)

    @property
    def sha256(self) -> str:
        """The hex sha256 of everything written so far."""
        return self._digest.hexdigest()

    def commit(self, path: Path, sync_dir: bool = True) -> None:
        """fsync the file, rename it to `path` (replacing what was there) and, with `sync_dir`,
        fsync the directory so that the rename is on disk too."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.temp, path)
        if sync_dir:
            fsync_dir(Path(path).parent)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._file.close()
        self.temp.unlink(missing_ok=True)


def durable_write(path: Path, chunks: Iterable[bytes], mode: int = 0o600, sync_dir: bool = True) -> str:
    """Replace `path` whole with the concatenated chunks, durably (see DurableFile); return
    their sha256. The temporary file is hidden beside it: .NAME.XXXX.part."""
    path = Path(path)
    with DurableFile(path.parent, f".{path.name}.", ".part", mode) as f:
        for chunk in chunks:
            f.write(chunk)
        f.commit(path, sync_dir)
    return f.sha256
