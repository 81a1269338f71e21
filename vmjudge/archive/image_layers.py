"""Each layer of a container image read through once, before anything of it is unpacked: its
bytes checked against the digests the image names, and every member's header against what a
layer may hold.

A layer is a tar that is applied over the ones below it (the OCI image spec's layer.md), so the
checks are the entry archive's (members.py), loosened where images need it and kept where the
judge's safety does:

- Names are relative: none absolute, none climbing with "..", none longer than 3072 bytes or
  deeper than 256 directories (the host unpacks them below a directory of its own).
  Files in a layer may have any owner and mode; setuid and setgid bits are counted here and
  stripped when the root is made (images/entry_root.py).
- Symbolic links may point anywhere (they are read inside the entry's root, in the VM); a hard
  link must name a file earlier in the same layer, which is all image tools write, and never an
  absolute or climbing path such as /etc/shadow or ../../x.
- Whiteouts are `.wh.NAME` files and `.wh..wh..opq` (an opaque directory); a whiteout of "",
  "." or ".." (`.wh.`, `.wh..`, `.wh...`), any other `.wh..wh.` name, a directory named `.wh.*`
  or a whiteout that is itself a directory is refused: none is a change a tool records.
- Character and block devices and FIFOs are allowed and counted (base images have carried /dev
  entries); the root is made without the devices. Sparse members are refused, as bounded.py
  refuses them (no image tool writes them, and their apparent size is what they would unpack to).
- Every regular file's declared size counts against max_unpacked, over all layers together, as
  do the layers' extended headers; every member counts against max_members.
- The blob's sha256 must be its digest (OCI), and the uncompressed tar's sha256 its diff_id in
  the config, so that what was checked is what skopeo and umoci will read.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from dataclasses import dataclass
from typing import Any, Protocol

from .bounded import Refused, check_end, open_tar_stream
from .image_layout import COMPRESSIONS, REBUILD, REBUILD_LAYERS, ImageLayout, LayerRef, refused

NAME_MAX = 255  # bytes of one path part (Linux)
# Bytes of a path in the image, and its parts: the host unpacks it below a work directory, and
# every path there, that directory's included, must stay within Linux's 4096 bytes; the tools
# that walk the tree go no deeper than a real root ever does.
PATH_MAX = 3072
DEPTH_MAX = 256
TARGET_MAX = 4095  # bytes of a symbolic link's target (Linux)
CHUNK = 1 << 20
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
LAYER_TYPES = {"application/vnd.oci.image.layer.v1.tar": None,
               "application/vnd.oci.image.layer.v1.tar+gzip": "gzip",
               "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip"}
DEVICES = (tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE)


@dataclass(frozen=True)
class LayerFacts:
    """What one layer was found to hold: its digests, how it is compressed, its members, the
    bytes its regular files declare, and the device nodes and FIFOs, and the setuid or setgid
    members, that the root is made without."""

    digest: str
    diff_id: str
    compression: str | None
    members: int
    unpacked: int
    devices: int
    setid: int


class _Readable(Protocol):
    def read(self, n: int, /) -> bytes: ...


class _Hashing(io.RawIOBase):
    """A raw stream that hashes what is read through it."""

    def __init__(self, raw: _Readable):
        super().__init__()
        self.raw, self.sha = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        buffer[:len(data)] = data
        self.sha.update(data)
        return len(data)

    def drain(self) -> str:
        while self.read(CHUNK):
            pass
        return "sha256:" + self.sha.hexdigest()


class Budget:
    """Members and bytes left for the whole image, spent layer by layer."""

    def __init__(self, max_members: int, max_unpacked: int, members: int):
        self.max_members, self.max_unpacked = max_members, max_unpacked
        self.members, self.declared = members, 0

    def spend(self, members: int, declared: int) -> None:
        self.members += members
        self.declared += declared
        if self.members > self.max_members:
            raise refused(f"The image holds more than {self.max_members:,} files in its layers, more than this "
                          "challenge takes: make it smaller (a slimmer base image, fewer files) and submit again.")
        if self.declared > self.max_unpacked:
            raise refused(f"The image unpacks to more than {self.max_unpacked:,} bytes ({self.declared:,} declared "
                          "so far by its files' headers), more than this challenge takes: make it smaller (a "
                          "slimmer base image, no caches or build tools) and submit again.")


def _shown(name: str) -> str:
    name = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return repr(name[:160])


def _path(raw: str, n: int, what: str = "member") -> list[str]:
    """A member's (or a hard link's target's) path parts, or the sentence refusing it."""
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if raw.startswith("/") or ".." in parts:
        raise refused(f"Layer {n} of the image holds a {what} {_shown(raw)} that is absolute or climbs with '..', "
                      f"which no image tool writes: {REBUILD_LAYERS}.")
    if len(raw.encode("utf-8", "surrogateescape")) > PATH_MAX or any(
            len(p.encode("utf-8", "surrogateescape")) > NAME_MAX for p in parts):
        raise refused(f"Layer {n} of the image holds a {what} {_shown(raw)} longer than vmjudge unpacks ({PATH_MAX} "
                      f"bytes, {NAME_MAX} a name): shorten it, {REBUILD_LAYERS}.")
    if len(parts) > DEPTH_MAX:
        raise refused(f"Layer {n} of the image holds a {what} {_shown(raw)} {len(parts)} directories deep, deeper than "
                      f"the {DEPTH_MAX} vmjudge unpacks: flatten it, {REBUILD_LAYERS}.")
    return parts


def _whiteout(parts: list[str], ti: tarfile.TarInfo, n: int) -> None:
    """Refuse whiteouts that no tool writes (see the module's docstring)."""
    if any(p.startswith(WHITEOUT) for p in parts[:-1]):
        raise refused(f"Layer {n} of the image holds {_shown(ti.name)}, inside a directory named like a whiteout "
                      f"('.wh.'), which no image tool writes: {REBUILD_LAYERS}.")
    base = parts[-1] if parts else ""
    if not base.startswith(WHITEOUT) or base == OPAQUE:
        if base == OPAQUE and ti.isdir():
            raise refused(f"Layer {n} of the image holds the opaque marker {_shown(ti.name)} as a directory: "
                          f"{REBUILD_LAYERS}.")
        return
    target = base[len(WHITEOUT):]
    if target in ("", ".", ".."):
        why = "which would remove the directory itself or its parent"
    elif target.startswith(WHITEOUT):
        why = "a name kept for the union file systems' own use"
    elif ti.isdir():
        why = "as a directory"
    else:
        return
    raise refused(f"Layer {n} of the image holds the whiteout {_shown(ti.name)}, {why}: no image tool writes it; "
                  f"{REBUILD_LAYERS}.")


def _walk(tf: tarfile.TarFile, n: int, budget: Budget) -> tuple[int, int, int, int]:
    """Check every header of one layer; its members, declared bytes, devices and setid members."""
    seen: dict[str, bool] = {}  # path → whether a hard link may name it
    members = declared = devices = setid = 0
    extended = 0
    while (ti := tf.next()) is not None:
        members += 1
        size = ti.size if ti.isreg() else 0
        budget.spend(1, size + tf.extended_bytes - extended)  # type: ignore[attr-defined]
        extended = tf.extended_bytes  # type: ignore[attr-defined]
        declared += size
        parts = _path(ti.name, n)
        path = "/".join(parts)
        if path in seen:
            raise refused(f"Layer {n} of the image holds {_shown(path)} twice, which the OCI image spec forbids: "
                          f"{REBUILD_LAYERS}.")
        _whiteout(parts, ti, n)
        if not path and not ti.isdir():
            raise refused(f"Layer {n} of the image holds a member for its root that is not a directory: "
                          f"{REBUILD_LAYERS}.")
        if ti.islnk():
            target = "/".join(_path(ti.linkname, n, "hard link to"))
            if not seen.get(target):
                raise refused(f"Layer {n} of the image holds a hard link {_shown(path)} to {_shown(ti.linkname)}, "
                              "which is not a file earlier in that layer (image tools link only to those): "
                              f"{REBUILD_LAYERS}.")
        elif ti.issym():
            if not ti.linkname or len(ti.linkname.encode("utf-8", "surrogateescape")) > TARGET_MAX:
                raise refused(f"Layer {n} of the image holds a symbolic link {_shown(path)} with an empty or over-long "
                              f"target: {REBUILD_LAYERS}.")
        elif ti.type in DEVICES:
            devices += 1
        elif not (ti.isreg() or ti.isdir()):
            raise refused(f"Layer {n} of the image holds {_shown(path)} of tar type {ti.type!r}, which is not a file, "
                          f"directory, link, device or FIFO: {REBUILD_LAYERS}.")
        setid += bool(ti.mode & 0o6000)
        seen[path] = not ti.isdir() and not parts[-1].startswith(WHITEOUT)
    check_end(tf, members, budget.max_unpacked - budget.declared)
    return members, declared, devices, setid


def _compression(ref: LayerRef, head: bytes, n: int) -> str | None:
    found = next((k for magic, k in COMPRESSIONS.items() if head.startswith(magic)), None)
    if found not in (None, "gzip"):
        raise refused(f"Layer {n} of the image is {found}-compressed, which vmjudge does not unpack: save the image "
                      "with gzip or uncompressed layers (`docker save` writes them) and submit again.")
    if ref.media_type is not None:
        if "zstd" in ref.media_type:
            raise refused(f"Layer {n} of the image is zstd-compressed, which vmjudge does not unpack: save the image "
                          "with gzip or uncompressed layers (`docker save` writes them) and submit again.")
        if ref.media_type not in LAYER_TYPES:
            raise refused(f"Layer {n} of the image is of media type {ref.media_type[:80]!r}, which is not a layer "
                          f"vmjudge unpacks (a tar, gzipped or not): {REBUILD}.")
        if LAYER_TYPES[ref.media_type] != found:
            raise refused(f"Layer {n} of the image is {found + '-compressed' if found else 'uncompressed'} where its "
                          "manifest says "
                          f"{ref.media_type}: {REBUILD}.")
    return found


def check_layer(blob: io.BufferedReader, ref: LayerRef, n: int, budget: Budget) -> LayerFacts:
    """Read one layer's blob through: its headers checked, its digests compared."""
    compression = _compression(ref, blob.peek(8)[:8], n)
    stored = _Hashing(blob)
    tar_bytes = _Hashing(gzip.GzipFile(fileobj=stored) if compression == "gzip" else stored)
    try:
        with open_tar_stream(io.BufferedReader(tar_bytes, CHUNK)) as tf:
            members, declared, devices, setid = _walk(tf, n, budget)
    except Refused as exc:
        raise refused(f"Layer {n} of the image holds {exc}: {REBUILD_LAYERS}.") from exc
    diff_id, digest = tar_bytes.drain(), stored.drain()
    if ref.digest is not None and digest != ref.digest:
        raise refused(f"Layer {n} of the image does not match its digest ({ref.digest} named, {digest} found): the "
                      f"archive is damaged or was altered; {REBUILD}.")
    if diff_id != ref.diff_id:
        raise refused(f"Layer {n} of the image does not match the digest its config lists ({ref.diff_id} named, "
                      f"{diff_id} found): the archive is damaged or was altered; {REBUILD}.")
    return LayerFacts(digest, diff_id, compression, members, declared, devices, setid)


def check_layers(tf: tarfile.TarFile, layout: ImageLayout, budget: Budget) -> list[LayerFacts]:
    """Every layer of `layout`, read from the outer tar `tf` in the archive's order, in the
    image's order. A blob the image lists twice is read once; each listing must match its
    digests all the same, and counts against the budget."""
    wanted: dict[str, list[int]] = {}
    for i, ref in enumerate(layout.layers):
        wanted.setdefault(ref.member, []).append(i)
    facts: dict[int, LayerFacts] = {}
    while (ti := tf.next()) is not None:
        name = "/".join(p for p in ti.name.split("/") if p not in ("", "."))
        if not ti.isreg() or name not in wanted:
            continue
        first, *again = wanted.pop(name)
        blob = tf.extractfile(ti)
        assert isinstance(blob, io.BufferedReader)
        facts[first] = found = check_layer(blob, layout.layers[first], first + 1, budget)
        for i in again:
            ref = layout.layers[i]
            if (ref.digest or found.digest, ref.diff_id) != (found.digest, found.diff_id):
                raise refused(f"Layer {i + 1} of the image does not match the digest its config lists: the archive "
                              f"is damaged or was altered; {REBUILD}.")
            budget.spend(found.members, found.unpacked)
            facts[i] = found
    if wanted:
        first = min(i for indexes in wanted.values() for i in indexes)
        raise refused(f"Layer {first + 1} of the image was not found in the archive on a second reading: {REBUILD}.")
    return [facts[i] for i in range(len(layout.layers))]
