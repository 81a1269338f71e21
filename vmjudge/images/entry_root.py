"""A container entry's root file system (#39): from the image archive admission checked to a
read-only squashfs the entry's commands will run in, made on the host by stage 1 (prep).

The layers are applied by well-kept tools, never by whiteout logic of vmjudge's own: skopeo
turns the saved image into an OCI layout and umoci applies its layers into a tree (root_tools.py),
with the image's owners kept (umoci runs as root, not --rootless, which would make every file
root's); root_tree.py then takes out what the root must not hold (device nodes, setuid and setgid
bits), and mksquashfs makes the squashfs without extended attributes (file capabilities, SELinux
labels: none is the entry's to set) and with the image's owners and modes. The guest maps the
image's user to one that is not root and mounts the root read-only.

Roots are content-addressed: named by the chain ID of the image's layers (which admission
verified against their bytes), under HOME/entry-roots/RULES, so that the same layers are
unpacked once however many entries or tools saved them, and roots made under other rules (a
change to what is taken out) are never reused. A lock file per root makes concurrent calls
safe: the first makes it, in a work directory beside it, and renames it into place; the others
wait and find it made. Work directories are removed on every path, and a crash's are removed
by the next call for the same root. Stage 1 holds the lock until it has recorded which root its
entry uses (held_root), and each use touches the root's record: `vmjudge gc` (root_store.py),
which takes the same lock, thus never removes a root between its finding and its recording, and
knows when each was last used. The lock file may be removed by its holder (gc does): a waiter
that then gets a removed file's lock takes the new file's instead (root_lock).

The disk: before anything is written, the free space must hold what the making can take at
its peak (the archive decompressed, skopeo's copy and its own unpacking of an OCI archive, the
tree, the squashfs); too little is the host's failure ("host-disk-full"), retried later. The
tools write within that and no further: skopeo and umoci in a scratch file system sized from
what admission found the image to hold, mksquashfs under a file size limit (root_tools.py). An
image larger than the challenge allows, or than it declared, is the entry's (EntryError).

One image: after skopeo has copied the archive, the image it wrote must be the one admission
read, its layers' digests (the config's diff_ids) the ones admission checked, or the entry is
refused before umoci reads a byte of it; umoci then checks every layer it applies against those
digests. So the root stored under a chain ID is the one those layers make, whatever an archive
could make one reader see that the other did not.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import private
from ..archive.container_image import CheckedImage, ImageConfig
from ..config.layout import Layout
from ..errors import EntryError, InfrastructureError
from ..files import CHUNK, durable_write, fsync_dir
from .root_copy import check_copied
from .root_tools import INODE_BYTES, TOO_BIG_SENTENCE, remove_tree, run_tool, scratch, version
from .root_tree import neutralise

RULES = "v1"  # what a root is made without; a change makes new roots rather than reuse old ones
MARGIN = 256 << 20  # free bytes left beyond the estimate
SCRATCH_MARGIN = 32 << 20  # the scratch file system's room beyond the estimate: ext4's own blocks
INODE = 4096  # bytes a file may take beyond its data, in the tree and its squashfs
TAG = "root"
ROOT_ID = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class RootTimeouts:
    """Seconds each tool may take: a base, and more per GiB of the image (stored and unpacked)."""

    base: float = 300.0
    per_gib: float = 120.0

    def seconds(self, image: CheckedImage) -> float:
        return self.base + self.per_gib * (image.stored_bytes + image.unpacked_bytes) / (1 << 30)


@dataclass(frozen=True)
class EntryRoot:
    """An entry's root, made or found: `digest` its chain ID, `path` the squashfs; the bytes of
    the squashfs and of the files in it; what was taken out; the image's run settings."""

    digest: str
    path: Path
    squashfs_bytes: int
    unpacked_bytes: int
    files: int
    devices_removed: int
    setid_cleared: int
    image_id: str
    config: ImageConfig
    reused: bool
    # Seconds each step took when the root was made (skopeo, umoci, neutralise, mksquashfs), as
    # its record keeps them: what a reused root cost once.
    seconds: dict[str, float] = field(default_factory=dict, compare=False)
    # Seconds the making took all told (its record's made_seconds); None from a record without it.
    made_seconds: float | None = field(default=None, compare=False)

    def manifest(self) -> dict[str, Any]:
        """What the stage's manifest records of the root."""
        return {"digest": self.digest, "image_id": self.image_id, "squashfs_bytes": self.squashfs_bytes,
                "unpacked_bytes": self.unpacked_bytes, "files": self.files, "devices_removed": self.devices_removed,
                "setid_cleared": self.setid_cleared, "config": self.config.as_dict(), "rules": RULES,
                "made_seconds": dict(self.seconds)}


def scratch_bytes(image: CheckedImage) -> int:
    """The scratch file system's size: the archive decompressed, skopeo's copy of it and its own
    unpacking of an OCI archive, each with a header's worth per member; the tree, a block and an
    inode per member beyond its files' bytes; and a margin."""
    stored = image.stored_bytes + 1024 * image.members
    return 3 * stored + image.unpacked_bytes + (INODE + INODE_BYTES) * image.members + SCRATCH_MARGIN


def squashfs_limit(image: CheckedImage) -> int:
    """The largest squashfs the tree can make: its bytes, and a block per file, uncompressed."""
    return image.unpacked_bytes + INODE * image.members + SCRATCH_MARGIN


def needed_bytes(image: CheckedImage) -> int:
    """The most disk the making takes at once (see the module's docstring), with a margin."""
    return scratch_bytes(image) + squashfs_limit(image) + MARGIN


def store_of(layout: Layout) -> Path:
    """Where roots made under the current rules are kept."""
    return layout.entry_roots / RULES


def lock_path(squashfs: Path) -> Path:
    """The lock file of the root at `squashfs` (its name, hidden, with .lock)."""
    return squashfs.with_name(f".{squashfs.stem}.lock")


@contextmanager
def root_lock(path: Path, wait: bool = True) -> Iterator[bool]:
    """The lock file at `path` held (True), or, when not `wait`ing and another holds it, not (False).
    A holder may unlink the file (gc does, with the root it locks): a waiter whose lock is then on
    a file no longer at `path` lets it go and locks the file that is there now, so two holders
    never hold "the" lock at once."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, private.FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            yield False
            return
        try:
            now = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        held = os.fstat(fd)
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # removed (or replaced) while this call waited: lock the one there now
    try:
        yield True
    finally:
        os.close(fd)  # releases the lock


def _used(record: Path) -> None:
    """The root was used now: its record's time says so. gc relies on it (it removes roots unused
    for long, and keeps one used since it listed the entries' records), so a failure is raised:
    the host's (OSError), and the stage runs again."""
    os.utime(record)


def _found(image: CheckedImage, squashfs: Path, record: Path) -> EntryRoot | None:
    """The root already made, if its squashfs and record are there and agree."""
    return _recorded(image.root_id, image.image_id, image.config, squashfs, record)


def _recorded(root_id: str, image_id: str, config: ImageConfig, squashfs: Path, record: Path) -> EntryRoot | None:
    try:
        doc = json.loads(record.read_text())
        size = squashfs.stat().st_size
        if doc["digest"] != root_id or doc["squashfs_bytes"] != size:
            return None
        return EntryRoot(root_id, squashfs, size, int(doc["unpacked_bytes"]), int(doc["files"]),
                         int(doc["devices_removed"]), int(doc["setid_cleared"]), image_id, config,
                         reused=True, seconds={str(k): float(v) for k, v in doc.get("seconds", {}).items()},
                         made_seconds=float(doc["made_seconds"]) if "made_seconds" in doc else None)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not made, or a record that cannot be read: made again


def made_root(layout: Layout, root_id: str, image_id: str, config: ImageConfig) -> EntryRoot | None:
    """The root of chain ID `root_id`, if it is made, used now (under its lock); None if it is not:
    for a caller that kept what admission found of an image it checked once (evaluation_root.py)."""
    if not ROOT_ID.fullmatch(root_id):
        return None
    name = root_id.removeprefix("sha256:")
    squashfs, record = store_of(layout) / f"{name}.squashfs", store_of(layout) / f"{name}.json"
    if not record.is_file():
        return None
    with root_lock(lock_path(squashfs)):
        root = _recorded(root_id, image_id, config, squashfs, record)
        if root is not None:
            _used(record)
        return root


def _plain_archive(archive: Path, image: CheckedImage, work: Path) -> Path:
    """The archive as skopeo reads it: a gzipped one decompressed into the work directory
    (skopeo's docker-archive: does not read gzip). What admission read is written: the members,
    their headers and the end; zeros beyond that, which admission let pass as padding, are read
    and left out."""
    if not image.gzipped:
        return archive
    plain = work / "image.tar"
    left = image.stored_bytes + 1024 * image.members + (16 << 20)
    with gzip.open(archive, "rb") as src, open(plain, "wb") as out:
        while chunk := src.read(CHUNK):
            out.write(chunk[:left])
            if chunk[left:].strip(b"\0"):
                raise InfrastructureError("entry-root", f"{archive} holds more than admission read: the spooled "
                                                        "archive is not the one admitted.")
            left = max(0, left - len(chunk))
    return plain


class _Clock:
    """Seconds each step of the making took, by name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, step: str) -> None:
        now = time.monotonic()
        self.seconds[step] = round(now - self._last, 3)
        self._last = now


def _make(archive: Path, image: CheckedImage, work: Path, timeout: float,
          max_unpacked: int) -> tuple[Path, dict[str, Any]]:
    """The squashfs made in `work`, and the facts its record keeps. skopeo and umoci write in a
    scratch file system (root_tools.scratch), mksquashfs beside it under a file size limit."""
    clock = _Clock()
    inodes = image.members + 4096
    with scratch(work, scratch_bytes(image), inodes, timeout) as space:
        source = _plain_archive(archive, image, space)
        oci_dir = space / "oci"
        # An OCI archive's layers are copied as they are. A docker save's are gzipped on the way: its
        # manifest calls every layer gzipped, and skopeo 1.9 would keep an uncompressed one under that
        # name, which umoci then cannot read.
        keep = ["--dest-oci-accept-uncompressed-layers"] if image.format == "oci-archive" else []
        limit = scratch_bytes(image)
        run_tool(["skopeo", "--insecure-policy", "--tmpdir", str(space / "tmp"), "copy", "--quiet", *keep,
                  f"{image.format}:{source}", f"oci:{oci_dir}:{TAG}"], space, timeout, limit, host=work)
        if source != archive:
            source.unlink()
        check_copied(oci_dir, image)
        clock.lap("skopeo")  # with the gzip decompression before it, if any
        tree = space / "rootfs"
        run_tool(["umoci", "--log", "error", "raw", "unpack", "--image", f"{oci_dir}:{TAG}", str(tree)], space,
                 timeout, limit, host=work)
        remove_tree(oci_dir)
        remove_tree(space / "tmp")
        clock.lap("umoci")
        facts = neutralise(tree)
        clock.lap("neutralise")
        if facts.bytes > max_unpacked:
            raise EntryError("bad-image", f"The image unpacked to {facts.bytes:,} bytes, more than the "
                                          f"{max_unpacked:,} this challenge takes: make it smaller and submit again.")
        if facts.bytes > image.unpacked_bytes:
            raise EntryError("bad-image", TOO_BIG_SENTENCE)
        squashfs = work / "root.squashfs"
        run_tool(["mksquashfs", str(tree), str(squashfs), "-comp", "lz4", "-noappend", "-no-xattrs", "-no-recovery",
                  "-quiet", "-no-progress", "-mkfs-time", "0"], work, timeout, squashfs_limit(image))
        clock.lap("mksquashfs")
    return squashfs, {"files": facts.files, "unpacked_bytes": facts.bytes, "devices_removed": facts.devices_removed,
                      "setid_cleared": facts.setid_cleared, "seconds": clock.seconds}


def entry_root(layout: Layout, archive: Path, image: CheckedImage, max_unpacked: int,
               timeouts: RootTimeouts = RootTimeouts()) -> EntryRoot:
    """The root of the image in `archive` (checked by admission as `image`): made, or found
    made; see the module's docstring. `max_unpacked` is the challenge's limit now."""
    with held_root(layout, archive, image, max_unpacked, timeouts) as root:
        return root


@contextmanager
def held_root(layout: Layout, archive: Path, image: CheckedImage, max_unpacked: int,
              timeouts: RootTimeouts = RootTimeouts()) -> Iterator[EntryRoot]:
    """entry_root's root, with its lock held until the block ends: stage 1 records which root its
    entry uses within it, so that gc, which takes the lock, sees the use before it may remove it."""
    if image.unpacked_bytes > max_unpacked:
        raise EntryError("bad-image", f"The image unpacks to {image.unpacked_bytes:,} bytes, more than the "
                                      f"{max_unpacked:,} this challenge takes: make it smaller and submit again.")
    store = private.make_dir(store_of(layout), private.CROSSABLE_DIR)
    os.chmod(layout.entry_roots, private.CROSSABLE_DIR)
    name = image.root_id.removeprefix("sha256:")
    squashfs, record = store / f"{name}.squashfs", store / f"{name}.json"
    with root_lock(lock_path(squashfs)):
        root = _found(image, squashfs, record) or _made(image, archive, store, name, max_unpacked, timeouts)
        _used(record)
        yield root


def _made(image: CheckedImage, archive: Path, store: Path, name: str, max_unpacked: int,
          timeouts: RootTimeouts) -> EntryRoot:
    """The root made and put in place (the caller holds its lock)."""
    squashfs, record = store / f"{name}.squashfs", store / f"{name}.json"
    for left in store.glob(f".work-{name}-*"):  # a crash's: the lock says no one else is at it
        remove_tree(left)
    free = shutil.disk_usage(store).free
    if free < (needed := needed_bytes(image)):
        raise InfrastructureError("host-disk-full", f"{store} has {free >> 20} MiB free, and making this entry's "
                                                    f"root may take {needed >> 20} MiB: free some space.")
    work = Path(tempfile.mkdtemp(prefix=f".work-{name}-", dir=store))
    try:
        started = time.monotonic()
        made, facts = _make(archive, image, work, timeouts.seconds(image), max_unpacked)
        os.chmod(made, private.FILE)
        with open(made, "rb") as f:
            os.fsync(f.fileno())
        size = made.stat().st_size
        doc = {"digest": image.root_id, "rules": RULES, "squashfs_bytes": size, **facts,
               "image_id": image.image_id, "made_seconds": round(time.monotonic() - started, 1),
               "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "tools": {tool: version(tool) for tool in ("skopeo", "umoci", "mksquashfs")}}
        durable_write(record, [json.dumps(doc, indent=1).encode()], sync_dir=False)
        os.replace(made, squashfs)
        fsync_dir(store)
    finally:
        remove_tree(work)
    return EntryRoot(image.root_id, squashfs, size, facts["unpacked_bytes"], facts["files"], facts["devices_removed"],
                     facts["setid_cleared"], image.image_id, image.config, reused=False, seconds=facts["seconds"],
                     made_seconds=doc["made_seconds"])
