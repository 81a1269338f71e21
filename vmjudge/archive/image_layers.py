"""Each layer of a container image read through once, as the archive holding it is read
(image_reading.py), before anything of it is unpacked: its bytes hashed for the digests the
image names, and every member's header checked against what a layer may hold. The tar is read
by image_tar.py, which reads it as Go's archive/tar (skopeo's and umoci's) does, and a gzipped
layer by a gzip reader as strict as Go's.

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
  entries); the root is made without the devices. Sparse members are refused (image_tar.py):
  no image tool writes them, and Go would unpack one to whatever size its header names.
- Every regular file's declared size counts against max_unpacked, over all layers together, as
  do the layers' extended headers; every member counts against max_members.
- The blob's sha256 must be its digest (OCI), and the uncompressed tar's sha256 its diff_id in
  the config (match_layer), so that what was checked is what skopeo and umoci will read.

A layer is checked before the archive's manifest is known (docker save writes it last), so a
refusal of its members names the layer by its member in the archive; one of its digests, by its
place in the image.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Protocol

from .image_layout import COMPRESSIONS, REBUILD, REBUILD_LAYERS, LayerRef, refused
from .image_tar import TarMember, TarReader, TarRefused

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


class Readable(Protocol):
    def read(self, n: int, /) -> bytes: ...


class Hashing:
    """A stream that hashes what is read through it."""

    def __init__(self, raw: Readable):
        self.raw, self.sha = raw, hashlib.sha256()

    def read(self, n: int, /) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        return data

    def drain(self) -> str:
        while self.read(CHUNK):
            pass
        return "sha256:" + self.sha.hexdigest()


class Gunzip:
    """A gzip stream (one member or several, one after another, as Go's reader takes them)
    decompressed as it is read, never more than is asked for; anything after the last member
    that is not another member is refused, as Go refuses it (Python's gzip would skip zeros)."""

    def __init__(self, raw: Readable):
        self.raw = raw
        self.inflate = zlib.decompressobj(31)
        self.pending = b""  # compressed bytes read but not yet given to zlib

    def _input(self) -> bytes:
        data, self.pending = self.pending or self.raw.read(CHUNK), b""
        return data

    def read(self, n: int, /) -> bytes:
        while True:
            if self.inflate.eof:
                rest = self.inflate.unused_data + self._input()
                if not rest:
                    return b""
                while len(rest) < 2 and (more := self.raw.read(CHUNK)):
                    rest += more
                if not rest.startswith(b"\x1f\x8b"):
                    raise TarRefused("data after its gzip stream")
                self.inflate, self.pending = zlib.decompressobj(31), rest
            data = self.inflate.unconsumed_tail or self._input()
            if not data:
                raise TarRefused("a gzip stream cut short")
            try:
                out = self.inflate.decompress(data, n)
            except zlib.error as exc:
                raise TarRefused(f"a damaged gzip stream ({exc})") from None
            if out:
                return out


class Budget:
    """Members and bytes left for the whole image, spent layer by layer."""

    def __init__(self, max_members: int, max_unpacked: int, members: int = 0):
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


def layer_name(member: str) -> str:
    """A layer's member in the archive, as a refusal names it (its hex cut short)."""
    return f"The image's layer {member[:40]}{'…' if len(member) > 40 else ''}"


def _path(raw: str, layer: str, what: str = "member") -> list[str]:
    """A member's (or a hard link's target's) path parts, or the sentence refusing it."""
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if raw.startswith("/") or ".." in parts:
        raise refused(f"{layer} holds a {what} {_shown(raw)} that is absolute or climbs with '..', which no image "
                      f"tool writes: {REBUILD_LAYERS}.")
    if len(raw.encode("utf-8", "surrogateescape")) > PATH_MAX or any(
            len(p.encode("utf-8", "surrogateescape")) > NAME_MAX for p in parts):
        raise refused(f"{layer} holds a {what} {_shown(raw)} longer than vmjudge unpacks ({PATH_MAX} bytes, {NAME_MAX} "
                      f"a name): shorten it, {REBUILD_LAYERS}.")
    if len(parts) > DEPTH_MAX:
        raise refused(f"{layer} holds a {what} {_shown(raw)} {len(parts)} directories deep, deeper than the "
                      f"{DEPTH_MAX} vmjudge unpacks: flatten it, {REBUILD_LAYERS}.")
    return parts


def _whiteout(parts: list[str], m: TarMember, layer: str) -> None:
    """Refuse whiteouts that no tool writes (see the module's docstring)."""
    shown = _shown("/".join(parts))
    if any(p.startswith(WHITEOUT) for p in parts[:-1]):
        raise refused(f"{layer} holds {shown}, inside a directory named like a whiteout ('.wh.'), which no "
                      f"image tool writes: {REBUILD_LAYERS}.")
    base = parts[-1] if parts else ""
    if not base.startswith(WHITEOUT) or base == OPAQUE:
        if base == OPAQUE and m.isdir():
            raise refused(f"{layer} holds the opaque marker {shown} as a directory: {REBUILD_LAYERS}.")
        return
    target = base[len(WHITEOUT):]
    if target in ("", ".", ".."):
        why = "which would remove the directory itself or its parent"
    elif target.startswith(WHITEOUT):
        why = "a name kept for the union file systems' own use"
    elif m.isdir():
        why = "as a directory"
    else:
        return
    raise refused(f"{layer} holds the whiteout {shown}, {why}: no image tool writes it; {REBUILD_LAYERS}.")


def _walk(reader: TarReader, layer: str, budget: Budget) -> tuple[int, int, int, int]:
    """Check every header of one layer; its members, declared bytes, devices and setid members."""
    seen: dict[str, bool] = {}  # path → whether a hard link may name it
    members = declared = devices = setid = 0
    extended = 0
    while (m := reader.next()) is not None:
        members += 1
        budget.spend(1, m.size + reader.extended_bytes - extended)
        extended = reader.extended_bytes
        declared += m.size
        parts = _path(m.name, layer)
        path = "/".join(parts)
        if path in seen:
            raise refused(f"{layer} holds {_shown(path)} twice, which the OCI image spec forbids: {REBUILD_LAYERS}.")
        _whiteout(parts, m, layer)
        if not path and not m.isdir():
            raise refused(f"{layer} holds a member for its root that is not a directory: {REBUILD_LAYERS}.")
        if m.islnk():
            target = "/".join(_path(m.linkname, layer, "hard link to"))
            if not seen.get(target):
                raise refused(f"{layer} holds a hard link {_shown(path)} to {_shown(m.linkname)}, which is not a file "
                              f"earlier in that layer (image tools link only to those): {REBUILD_LAYERS}.")
        elif m.issym():
            if len(m.linkname.encode("utf-8", "surrogateescape")) > TARGET_MAX:
                raise refused(f"{layer} holds a symbolic link {_shown(path)} with an over-long target: "
                              f"{REBUILD_LAYERS}.")
        elif m.isdev():
            devices += 1
        setid += bool(m.mode & 0o6000)
        seen[path] = not m.isdir() and not parts[-1].startswith(WHITEOUT)
    return members, declared, devices, setid


def _compression(head: bytes, layer: str) -> str | None:
    found = next((k for magic, k in COMPRESSIONS.items() if head.startswith(magic)), None)
    if found not in (None, "gzip"):
        raise refused(f"{layer} is {found}-compressed, which vmjudge does not unpack: save the image with gzip or "
                      "uncompressed layers (`docker save` writes them) and submit again.")
    return found


class _Peeked:
    """A stream with its first bytes read already and given back first."""

    def __init__(self, head: bytes, raw: Readable):
        self.head, self.raw = head, raw

    def read(self, n: int, /) -> bytes:
        if self.head:
            out, self.head = self.head[:n], self.head[n:]
            return out
        return self.raw.read(n)


def check_layer(blob: Readable, member: str, budget: Budget) -> LayerFacts:
    """Read one layer's blob (the archive's member `member`) through: its headers checked, its
    digests computed. The caller matches them with what the image names (match_layer)."""
    layer = layer_name(member)
    stored = Hashing(blob)
    head = stored.read(8)
    compression = _compression(head, layer)
    peeked = _Peeked(head, stored)
    tar_bytes = Hashing(Gunzip(peeked) if compression == "gzip" else peeked)
    try:
        members, declared, devices, setid = _walk(TarReader(tar_bytes), layer, budget)
        diff_id = tar_bytes.drain()
    except TarRefused as exc:
        raise refused(f"{layer} holds {exc}: {REBUILD_LAYERS}.") from None
    return LayerFacts(stored.drain(), diff_id, compression, members, declared, devices, setid)


def match_layer(facts: LayerFacts, ref: LayerRef, n: int) -> None:
    """The layer the image names as its `n`th is the one read: its compression as its media type
    says, its blob's digest and its tar's the ones named."""
    if ref.media_type is not None:
        if "zstd" in ref.media_type:
            raise refused(f"Layer {n} of the image is zstd-compressed, which vmjudge does not unpack: save the image "
                          "with gzip or uncompressed layers (`docker save` writes them) and submit again.")
        if ref.media_type not in LAYER_TYPES:
            raise refused(f"Layer {n} of the image is of media type {ref.media_type[:80]!r}, which is not a layer "
                          f"vmjudge unpacks (a tar, gzipped or not): {REBUILD}.")
        if LAYER_TYPES[ref.media_type] != facts.compression:
            found = facts.compression + "-compressed" if facts.compression else "uncompressed"
            raise refused(f"Layer {n} of the image is {found} where its manifest says {ref.media_type}: {REBUILD}.")
    if ref.digest is not None and facts.digest != ref.digest:
        raise refused(f"Layer {n} of the image does not match its digest ({ref.digest} named, {facts.digest} found): "
                      f"the archive is damaged or was altered; {REBUILD}.")
    if facts.diff_id != ref.diff_id:
        raise refused(f"Layer {n} of the image does not match the digest its config lists ({ref.diff_id} named, "
                      f"{facts.diff_id} found): the archive is damaged or was altered; {REBUILD}.")
