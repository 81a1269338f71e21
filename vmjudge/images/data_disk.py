"""A record set's files as a read-only disk of their own, made once and shared by every VM that
reads the set (#57).

A stage's CD once carried every file of the records it runs: the quiz the whole training set and
the exam the whole test set, written again for every entry and every attempt (about 2.5 s more per
GiB, per stage, under TCG). Now a Job names the CD directories that are a record set (Job.data),
and the judge's runner gives each as a disk made here: a squashfs of exactly the files the CD would
have held there, with the CD's modes (0444, 0555 for an executable, directories 0555, all root's),
attached read-only to every VM at once and mounted by the agent over that directory of the CD,
so an entry finds the same paths and names as before.

Why squashfs, uncompressed: the guest already mounts squashfs (entry roots), it holds files of any
size (ISO 9660 needs multi-extent files past 4 GiB), mksquashfs makes it at the disk's speed, and
with no compression the guest reads it as fast as a plain disk, where decompressing under emulation
would cost the entry's time (bench/data_scale.py measures both).

A disk is named by its content: the format and each file's path, executable bit and sha256. Hashing
a large set at every stage would cost what the disk saves, so the set's stat signature (each source's
path, inode, size and mtime; each generated file's bytes) is remembered with the key it gave
(.known/): unchanged files are never read again. A changed file changes the signature, the set is
hashed again, and a new disk is made; `vmjudge gc` removes the old one once no challenge's set names
it (data_store.py).

Locks: each disk has a lock file beside it. A run holds it shared from finding the disk until its VM
is gone; making a disk holds it exclusively, and so does gc removing one, without waiting: a disk in
use is never removed. The disk is root's and readable by qemu's group only (0640): it holds test
records, which no other user of the host may read, and no qemu may write it.
"""

from __future__ import annotations

import fcntl
import grp
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from .. import private
from ..errors import InfrastructureError
from ..files import durable_write, sha256_file, stat_signature

FORMAT = "vmjudge data disk 1: squashfs, uncompressed"  # in every key: another format makes other disks
SUFFIX = ".sqfs"
QEMU_GROUP = "libvirt-qemu"  # Debian's libvirt runs qemu as libvirt-qemu:libvirt-qemu
DISK_MODE = 0o640
# No compression (the guest reads at the disk's speed), no extended attributes, all files root's,
# times pinned: what the entry sees of a file is its name, its bytes and whether it is executable.
MKSQUASHFS_FLAGS = ("-noappend", "-no-xattrs", "-all-root", "-noI", "-noId", "-noD", "-noF", "-noX",
                    "-mkfs-time", "0", "-all-time", "0", "-root-mode", "555", "-quiet", "-no-progress")

Source = Path | bytes


@dataclass(frozen=True)
class DataDisk:
    """A made disk: the CD directory it stands for, its file and its key (its name)."""

    cd_dir: str
    path: Path
    key: str


def qemu_gid() -> int:
    try:
        return grp.getgrnam(QEMU_GROUP).gr_gid
    except KeyError:
        raise InfrastructureError("setup-problem", f"this host has no group {QEMU_GROUP}, which libvirt's qemu "
                                  "runs as and which a data disk is made readable by: install libvirt-daemon-system.")\
            from None


def _checked(rel: str) -> str:
    parts = PurePosixPath(rel).parts
    if not rel or rel.startswith("/") or any(p in (".", "..") for p in parts) or "\n" in rel or "\0" in rel:
        raise ValueError(f"not a path inside a data disk: {rel!r}")
    return rel


def signature(files: Mapping[str, Source]) -> str:
    """What the set is by its sources' stat signatures (no file read): equal, the key is equal.
    Without the ctime that files.stat_signature holds: making any disk links its sources, which
    changes their ctime, and a set sharing a file with another would never be found again."""
    h = hashlib.sha256(FORMAT.encode() + b"\n")
    for rel in sorted(files):
        source = files[rel]
        what = "b:" + hashlib.sha256(source).hexdigest() if isinstance(source, bytes) else \
            "f:" + json.dumps([str(source), *stat_signature(source)[:3]])
        h.update(_checked(rel).encode(errors="surrogateescape") + b"\0" + what.encode(errors="surrogateescape") + b"\n")
    return h.hexdigest()


def _executable(source: Source) -> bool:
    return not isinstance(source, bytes) and os.access(source, os.X_OK)


def content_key(files: Mapping[str, Source]) -> str:
    """The disk's name: the format, and each file's path, executable bit and sha256 (every file read)."""
    h = hashlib.sha256(FORMAT.encode() + b"\n")
    for rel in sorted(files):
        source = files[rel]
        digest = hashlib.sha256(source).hexdigest() if isinstance(source, bytes) else sha256_file(source)
        h.update(_checked(rel).encode(errors="surrogateescape") + b"\0" + (b"x" if _executable(source) else b"-") +
                 digest.encode() + b"\n")
    return h.hexdigest()


class DataDisks:
    """The store of data disks (Layout.data_disks)."""

    def __init__(self, store: Path):
        self.store = Path(store)

    def disk_path(self, key: str) -> Path:
        return self.store / (key + SUFFIX)

    def lock_path(self, key: str) -> Path:
        return self.store / (key + ".lock")

    def known_path(self, sig: str) -> Path:
        return self.store / ".known" / sig

    def known_key(self, files: Mapping[str, Source]) -> str | None:
        """The key the set's signature gave when its disk was last made, if that disk is still here."""
        try:
            key = self.known_path(signature(files)).read_text().strip()
        except OSError:
            return None
        return key if len(key) == 64 and self.disk_path(key).is_file() else None

    @contextmanager
    def held(self, cd_dir: str, files: Mapping[str, Source]) -> Iterator[DataDisk]:
        """The set's disk, made if it is not here yet, held (shared lock) until the block ends."""
        private.make_dir(self.store, private.CROSSABLE_DIR)
        key = self.known_key(files) or content_key(files)
        with self._shared(key, files):
            self._remember(signature(files), key)
            yield DataDisk(cd_dir, self.disk_path(key), key)

    @contextmanager
    def _shared(self, key: str, files: Mapping[str, Source]) -> Iterator[BinaryIO]:
        """The disk's lock held shared, with the disk there: made under the lock held exclusively if
        it was not. gc removes a disk and its lock file under that lock; a lock taken on a file gc
        removed meanwhile is no lock at all, so each taking is checked and the whole tried again."""
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
                        self._make(key, files)
                    fcntl.flock(lock, fcntl.LOCK_SH)
                    if self._stale(lock, key) or not self.disk_path(key).is_file():
                        continue
                yield lock
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

    def _make(self, key: str, files: Mapping[str, Source]) -> None:
        """Make the disk under its exclusive lock: the files gathered in a work tree (hard links where
        the store and the set share a file system, else copies), mksquashfs over it, the result renamed
        into place. The sources' signatures are checked again after: a file changed meanwhile is not
        what the key says, so the disk is thrown away and the stage tried again."""
        before = signature(files)
        work = private.fresh_dir(self.store / f".work-{key}")
        try:
            tree = work / "tree"
            tree.mkdir()
            modes = _gather(tree, files)
            pseudo = work / "modes"
            pseudo.write_text("".join(f'"{_quoted(rel)}" m {mode:o} 0 0\n' for rel, mode in sorted(modes.items())))
            part = work / ("disk" + SUFFIX)
            proc = subprocess.run(["mksquashfs", str(tree), str(part), *MKSQUASHFS_FLAGS, "-pf", str(pseudo)],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                reason = "host-disk-full" if "No space left" in proc.stderr else "data-disk"
                raise InfrastructureError(reason, f"mksquashfs could not make the data disk {key[:12]}: "
                                          f"{(proc.stderr or proc.stdout).strip()[-400:]}")
            if signature(files) != before:
                raise InfrastructureError("data-disk", "a record file changed while its data disk was made: the "
                                          "stage runs again with the files as they are now.")
            os.chown(part, 0, qemu_gid())
            os.chmod(part, DISK_MODE)
            with open(part, "rb") as f:
                os.fsync(f.fileno())
            os.replace(part, self.disk_path(key))
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _quoted(rel: str) -> str:
    return rel.replace("\\", "\\\\").replace('"', '\\"')


def _gather(tree: Path, files: Mapping[str, Source]) -> dict[str, int]:
    """The set's files under `tree`; what each path's mode on the disk is (files and directories)."""
    modes: dict[str, int] = {}
    for rel in sorted(files):
        source = files[rel]
        dest = tree / _checked(rel)
        for parent in PurePosixPath(rel).parents:
            if str(parent) != ".":
                modes[str(parent)] = 0o555
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, bytes):
            dest.write_bytes(source)
        else:
            try:
                os.link(source, dest)
            except OSError:  # another file system, or a link the kernel will not make: a copy
                shutil.copyfile(source, dest)
        modes[rel] = 0o555 if _executable(source) else 0o444
    return modes
