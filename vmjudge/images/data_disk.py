"""A record set's files as a read-only disk of their own, made once and shared by every VM that
reads the set (#57).

A stage's CD once carried every file of the records it runs: the quiz the whole training set and
the exam the whole test set, written again for every entry and every attempt (about 2.5 s more per
GiB, per stage, under TCG). Now a Job names the CD directories that are a record set (Job.data),
and the judge's runner gives each as a disk made here, holding exactly the files the CD would have
held there, attached read-only to every VM at once (virtio) and mounted by the agent over that
directory of the CD: an entry finds the same paths, names and modes as before.

Why ISO 9660 with Rock Ridge, written by the CD's own writer (iso.py): the modes and names are the
CD's by construction; files over 4 GiB are multi-extent files, which Linux reads whole; and Linux
reads it into the page cache with no copy of its own. Measured by bench/data_scale.py (512 MiB of
random bytes, page cache dropped, TCG, 2026-12-05), against the same file on a plain virtio disk
(ext4): this disk 1.0-1.05x; squashfs uncompressed 0.6x with its 128 KiB blocks and 0.81x with 1 MiB
ones (the kernel copies each block once more); the IDE CD-ROM 0.7-0.8x.

A disk is named by its content: the format and each file's path, executable bit and sha256. Hashing
a large set at every stage would cost what the disk saves, so the set's stat signature (each source's
path, inode, size, mtime and ctime; each generated file's bytes) is remembered with the key it gave
(.known/): unchanged files are never read again. A changed file changes the signature, the set is
hashed again, and a new disk is made; `vmjudge gc` removes the old one once no challenge's set names
it (data_store.py).

Locks: each disk has a lock file beside it. A run holds it shared from finding the disk until its VM
is gone; making a disk holds it exclusively, and so does gc removing one, without waiting: a disk in
use is never removed. The disk is root's and readable by qemu's group only (0640): it holds test
records, which no other user of the host may read, and no qemu may write it.

Hosts that share no files and keep blobs in an object store keep data disks there too
(queue/shared_disks.py): the first host to make a set's disk sends it, and the others fetch it.
"""

from __future__ import annotations

import fcntl
import grp
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from .. import private
from ..errors import ChallengeError, InfrastructureError, MediaError
from ..files import DurableFile, durable_write, sha256_file, stat_signature
from .iso import write_iso

FORMAT = "vmjudge data disk 1: ISO 9660, Rock Ridge"  # in every key: another format makes other disks
SUFFIX = ".iso"
KEY_RE = re.compile(r"[0-9a-f]{64}")  # a disk's name, less its suffix: nothing else in the store is a disk
WORK = ".work"  # disks being made (0700)
QEMU_GROUP = "libvirt-qemu"  # Debian's libvirt runs qemu as libvirt-qemu:libvirt-qemu
DISK_MODE = 0o640

Source = Path | bytes

log = logging.getLogger(__name__)


class DiskShare(Protocol):
    """Where hosts that share no files keep the disks they made (queue/shared_disks.py): a host that
    has not made a set's disk fetches it from there rather than make it."""

    def fetch(self, key: str, out: DurableFile) -> bool: ...

    def keep(self, key: str, path: Path) -> None: ...


@dataclass(frozen=True)
class DataDisk:
    """A made disk: the CD directory it stands for, its file and its key (its name); `how` it came to be
    here for this run: "found" (made before), "made", or "fetched" from the object store."""

    cd_dir: str
    path: Path
    key: str
    how: str = "found"


def qemu_gid() -> int:
    try:
        return grp.getgrnam(QEMU_GROUP).gr_gid
    except KeyError:
        raise InfrastructureError("setup-problem", f"this host has no group {QEMU_GROUP}, which libvirt's qemu "
                                  "runs as and which a data disk is made readable by: install libvirt-daemon-system.")\
            from None


def _checked(rel: str) -> str:
    """A path the set's files may have on the disk: a name of the organiser's that no disk can hold is the
    challenge's to fix, and the stage would fail again unchanged (ChallengeError: parked at once)."""
    parts = PurePosixPath(rel).parts
    if not rel or rel.startswith("/") or any(p in (".", "..") for p in parts) or "\n" in rel or "\0" in rel:
        raise ChallengeError("data-disk", f"a record set holds a file named {rel!r}, which no data disk can hold: "
                             "rename it in the challenge directory and run `vmjudge challenge add` again.")
    return rel


def _digest(files: Mapping[str, Source], line: Callable[[Source], bytes]) -> str:
    """A set's hash: the format, then each file's path and `line` of it, in the order of the paths."""
    h = hashlib.sha256(FORMAT.encode() + b"\n")
    for rel in sorted(files):
        h.update(_checked(rel).encode(errors="surrogateescape") + b"\0" + line(files[rel]) + b"\n")
    return h.hexdigest()


def signature(files: Mapping[str, Source]) -> str:
    """What the set is by its sources' stat signatures (no file read): equal, the key is equal."""
    return _digest(files, lambda source: (
        "b:" + hashlib.sha256(source).hexdigest() if isinstance(source, bytes) else
        "f:" + json.dumps([str(source), *stat_signature(source)])).encode(errors="surrogateescape"))


def _executable(source: Source) -> bool:
    return not isinstance(source, bytes) and os.access(source, os.X_OK)


def content_key(files: Mapping[str, Source]) -> str:
    """The disk's name: the format, and each file's path, executable bit and sha256 (every file read)."""
    return _digest(files, lambda source: (b"x" if _executable(source) else b"-") + (
        hashlib.sha256(source).hexdigest() if isinstance(source, bytes) else sha256_file(source)).encode())


class DataDisks:
    """The store of data disks (Layout.data_disks)."""

    def __init__(self, store: Path, share: DiskShare | None = None):
        """`share`: the object store's disks, when [storage] has one (Queue.shared_disks)."""
        self.store, self.share = Path(store), share

    def disk_path(self, key: str) -> Path:
        return self.store / (key + SUFFIX)

    def lock_path(self, key: str) -> Path:
        return self.store / (key + ".lock")

    def known_path(self, sig: str) -> Path:
        return self.store / ".known" / sig

    def known_key(self, files: Mapping[str, Source]) -> str | None:
        """The key the set's signature gave when its disk was last made, if that disk is still here."""
        return self._known(signature(files))

    def _known(self, sig: str) -> str | None:
        try:
            key = self.known_path(sig).read_text().strip()
        except OSError:
            return None
        return key if KEY_RE.fullmatch(key) and self.disk_path(key).is_file() else None

    @contextmanager
    def held(self, cd_dir: str, files: Mapping[str, Source]) -> Iterator[DataDisk]:
        """The set's disk, made if it is not here yet, held (shared lock) until the block ends. The set's
        signature is taken once, before anything is hashed, and taken again once the disk is held: a file
        changed in between would leave a disk (or a memo) that is not the files, so the stage runs again."""
        private.make_dir(self.store, private.CROSSABLE_DIR)
        sig = signature(files)
        key = self._known(sig) or content_key(files)
        with self._shared(key, files, sig) as how:
            _unchanged(files, sig)
            self._remember(sig, key)
            yield DataDisk(cd_dir, self.disk_path(key), key, how)

    @contextmanager
    def _shared(self, key: str, files: Mapping[str, Source], sig: str) -> Iterator[str]:
        """The disk's lock held shared, with the disk there: made under the lock held exclusively if
        it was not. gc removes a disk and its lock file under that lock; a lock taken on a file gc
        removed meanwhile is no lock at all, so each taking is checked and the whole tried again.
        Yields how the disk came (DataDisk.how)."""
        how = "found"
        while True:
            with open(self.lock_path(key), "a+b") as lock:
                fcntl.flock(lock, fcntl.LOCK_SH)
                if self._stale(lock, key):
                    continue
                if not self.disk_path(key).is_file():
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    if self._stale(lock, key):
                        continue
                    if not self.disk_path(key).is_file():
                        how = self._make(key, files, sig)
                    fcntl.flock(lock, fcntl.LOCK_SH)
                    if self._stale(lock, key) or not self.disk_path(key).is_file():
                        continue
                yield how
                return

    def _stale(self, lock: BinaryIO, key: str) -> bool:
        try:
            return os.stat(self.lock_path(key)).st_ino != os.fstat(lock.fileno()).st_ino
        except FileNotFoundError:
            return True

    def _remember(self, sig: str, key: str) -> None:
        with suppress(OSError):  # only a shortcut: without it the set is hashed again next time
            private.make_dir(self.known_path(sig).parent, private.DIR)
            if not self.known_path(sig).is_file():
                durable_write(self.known_path(sig), [key.encode()], sync_dir=False)

    def _make(self, key: str, files: Mapping[str, Source], sig: str) -> str:
        """Make the disk under its exclusive lock: written in the store's private work directory by the CD's
        own writer (never readable by another user, even half made), given its owner and mode there, then
        renamed into place. The sources' signature is checked again after: a file changed meanwhile is not
        what the key says, so the disk is thrown away and the stage tried again. With an object store, a disk
        another host made is fetched rather than made, and one made here is sent there (shared_disks.py)."""
        work = private.make_dir(self.store / WORK, private.DIR)
        part = work / (key + SUFFIX)
        need = sum(len(s) if isinstance(s, bytes) else os.stat(s).st_size for s in files.values())
        free = shutil.disk_usage(work).free
        if free < need + (64 << 20):
            raise InfrastructureError("host-disk-full", f"the data disk {key[:12]} needs {need / 1e9:.1f} GB and "
                                      f"{self.store} has {free / 1e9:.1f} GB free: free some space (`vmjudge gc`).")
        try:
            how = "fetched" if self._fetched(key, part) else "made"
            if how == "made":
                write_iso(part, files, volume_id="VMJUDGE-DATA")
                _unchanged(files, sig)
                self._keep(key, part)
            os.chown(part, 0, qemu_gid())
            os.chmod(part, DISK_MODE)
            os.replace(part, self.disk_path(key))
            return how
        except MediaError as exc:
            raise InfrastructureError("data-disk", f"the data disk {key[:12]} could not be made: {exc}") from exc
        finally:
            part.unlink(missing_ok=True)

    def _fetched(self, key: str, part: Path) -> bool:
        """The disk fetched from the store at `part`, if some host sent it there. A store that cannot give
        it, or gives other bytes, costs this host only the making of it (the files are here)."""
        if self.share is None:
            return False
        try:
            with DurableFile(part.parent, prefix=f".{key}.", suffix=".part") as out:
                if not self.share.fetch(key, out):
                    return False
                out.commit(part, sync_dir=False)
        except InfrastructureError as exc:
            log.warning("data disk %s is made here from the challenge's files: %s", key[:12], exc)
            return False
        return True

    def _keep(self, key: str, part: Path) -> None:
        """The disk just made sent to the store for the other hosts; without it, each makes its own."""
        if self.share is not None:
            try:
                self.share.keep(key, part)
            except InfrastructureError as exc:
                log.warning("data disk %s was made but not sent to the object store, so other hosts make their "
                            "own: %s", key[:12], exc)

def _unchanged(files: Mapping[str, Source], sig: str) -> None:
    if signature(files) != sig:
        raise InfrastructureError("data-disk", "a record file changed while its data disk was found or made: the "
                                  "stage runs again with the files as they are now.")
