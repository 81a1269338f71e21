"""A container image archive's outer tar: which members a saved image may hold, its small
documents, and the one image it holds resolved from them: its config and its layers in order,
each with the digests that must match its bytes (image_layers.py checks them). The archive is
read once, by image_reading.py.

Two layouts are read, both as tools write them and without Docker: `docker save` (manifest.json
naming the config and each layer's member; Docker 25 adds an OCI layout beside it) and the OCI
image layout (`podman save --format oci-archive`, skopeo's oci-archive: oci-layout, index.json,
blobs/sha256/<hex>). When both are there, manifest.json is the one read, and the one the
unpacking reads too (skopeo's docker-archive:), so that the image checked is the image unpacked.

Each JSON document is read whole into memory, so each is capped (DOC_MAX) before it is parsed,
as are all of them together. skopeo and umoci parse the same documents with Go's encoding/json,
which matches keys without regard to case and keeps the last of two: a manifest holding both
"layers" and "Layers" would be one image to this reader and another to theirs, so an object
whose keys differ only in case is refused.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EntryError
from .image_tar import TarMember

DOC_MAX = 4 << 20  # bytes of one JSON document read (a config with a long history is some 100 KB)
DOCS_TOTAL = 32 << 20  # bytes of small documents kept from one archive
MAX_LAYERS = 127  # overlayfs's and Docker's limit on an image's layers
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
OCI_LAYOUT_NAMES = ("oci-layout", "index.json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
COMPRESSIONS = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"\xfd7zXZ\0": "xz", b"BZh": "bzip2"}
REBUILD = "save the image again with `docker save` or `podman save` and submit again"
# What a layer holds is the build's doing, not the save's.
REBUILD_LAYERS = "build the image with `docker build` or `podman build`, save it and submit again"


# What a saved image holds, by tool: docker save (before 25: <id>/{VERSION,json,layer.tar}, <hex>.json,
# manifest.json, repositories; since 25 an OCI layout beside them), podman's docker-archive (<hex>.tar,
# <hex>.json, legacy <id>/layer.tar links), and an OCI layout (oci-layout, index.json, blobs/sha256/<hex>).
HEX = "[0-9a-f]{64}"
DIRECTORIES = re.compile(rf"blobs|blobs/sha256|{HEX}")
DOCUMENTS = re.compile(rf"manifest\.json|index\.json|oci-layout|repositories|{HEX}\.json|{HEX}/json|{HEX}/VERSION")
LAYERS = re.compile(rf"{HEX}/layer\.tar|{HEX}\.tar")
BLOBS = re.compile(rf"blobs/sha256/{HEX}")


def refused(message: str) -> EntryError:
    return EntryError("bad-image", message)


@dataclass(frozen=True)
class LayerRef:
    """A layer as the image names it: the outer member holding its blob, the blob's digest where
    the layout names one (OCI; docker save's names its uncompressed tar only), the digest of its
    uncompressed tar (the config's diff_id), and its media type (OCI) saying how it is compressed."""

    member: str
    digest: str | None
    diff_id: str
    media_type: str | None


@dataclass(frozen=True)
class ImageLayout:
    """The one image an archive holds, resolved but not yet checked layer by layer. `format` is
    skopeo's transport for it ("docker-archive" or "oci-archive"); `gzipped` whether the outer
    tar is; `stored_bytes` what its members hold, which is what unpacking it copies."""

    format: str
    gzipped: bool
    config: dict[str, Any]
    config_digest: str
    manifest_digest: str | None
    layers: tuple[LayerRef, ...]
    stored_bytes: int
    members: int


def sniff(path: Path) -> str | None:
    """The outer compression: "gzip", None for a plain tar; others refused."""
    with open(path, "rb") as f:
        head = f.read(8)
    kind = next((k for magic, k in COMPRESSIONS.items() if head.startswith(magic)), None)
    if kind not in (None, "gzip"):
        raise refused(f"The image archive is {kind}-compressed: save it plain or with gzip "
                      "(`docker save app | gzip > team-image.tar.gz`) and submit again.")
    return kind


def member_name(raw: str) -> str:
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if raw.startswith("/") or ".." in parts or "\\" in raw or not parts:
        raise refused(f"The image archive holds a member named {raw[:160]!r}, which no image tool writes "
                      f"(absolute, climbing with '..', or empty): {REBUILD}.")
    return "/".join(parts)


def role(name: str, m: TarMember) -> str:
    """What the outer member `name` is to a saved image: "directory", "document" (a JSON
    document or a small file beside them), "layer", "blob" (a document or a layer, by its
    content), "link"; anything else no image tool saves, and is refused before its data is read."""
    if m.isdir() and DIRECTORIES.fullmatch(name):
        return "directory"
    if m.issym() and (DOCUMENTS.fullmatch(name) or LAYERS.fullmatch(name) or BLOBS.fullmatch(name)):
        return "link"
    if m.isreg():
        if DOCUMENTS.fullmatch(name):
            if m.size > DOC_MAX:
                raise refused(f"The image archive's {name} is {m.size:,} bytes, more than the {DOC_MAX >> 20} MiB "
                              f"vmjudge reads of a document: {REBUILD}.")
            return "document"
        if LAYERS.fullmatch(name):
            return "layer"
        if BLOBS.fullmatch(name):
            return "blob"
    what = "a directory" if m.isdir() else "a link" if m.issym() or m.islnk() else "a file" if m.isreg() else "a node"
    raise refused(f"The image archive holds {what} {name[:160]!r}, which is not one of the files `docker save`, "
                  f"`podman save` or an OCI layout holds: {REBUILD}.")


class Catalogue:
    """The outer tar's members (name → header) and the small documents read from them."""

    def __init__(self) -> None:
        self.headers: dict[str, TarMember] = {}
        self.docs: dict[str, bytes] = {}
        self.kept = 0
        self.stored = 0

    def add(self, name: str, m: TarMember) -> None:
        if name in self.headers:
            raise refused(f"The image archive holds {name} twice: {REBUILD}.")
        self.headers[name] = m
        self.stored += m.size

    def keep(self, name: str, body: bytes) -> None:
        """A document's bytes, within DOCS_TOTAL for the archive."""
        self.kept += len(body)
        if self.kept > DOCS_TOTAL:
            raise refused(f"The image archive holds more than {DOCS_TOTAL >> 20} MiB of JSON documents, more than "
                          f"vmjudge reads: {REBUILD}.")
        self.docs[name] = body

    def resolve(self, name: str, what: str) -> str:
        """The regular member `name` names, through one symbolic link (docker save links a
        layer saved twice to its first copy), never leaving the archive."""
        try:
            clean = member_name(name)
        except EntryError:
            raise refused(f"The image names its {what} as {name[:160]!r}, which is not a member's name: "
                          f"{REBUILD}.") from None
        m = self.headers.get(clean)
        if m is not None and m.issym():
            target = posixpath.normpath(posixpath.join(posixpath.dirname(clean), m.linkname))
            clean, m = target, None if target.startswith(("/", "..")) else self.headers.get(target)
        if m is None or not m.isreg():
            raise refused(f"The image names its {what} as {name[:160]!r}, which the archive does not hold (a blob "
                          f"left out when it was saved?): {REBUILD}.")
        return clean

    def document(self, name: str, what: str) -> tuple[Any, str]:
        """The JSON document in member `name` (resolved) and its sha256 digest."""
        member = self.resolve(name, what)
        if member not in self.docs:
            size = self.headers[member].size
            if size <= DOC_MAX:
                raise refused(f"The image's {what} ({member}) is not a JSON document: {REBUILD}.")
            raise refused(f"The image's {what} ({member}) is {size:,} bytes, more than the {DOC_MAX >> 20} MiB "
                          f"vmjudge reads of a JSON document: {REBUILD}.")
        body = self.docs[member]
        return parse_json(body, what), "sha256:" + hashlib.sha256(body).hexdigest()


def _no_case_twins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        folded = key.casefold()
        if folded in seen:
            raise ValueError(f"the key {key!r} appears twice (letter case aside)")
        seen.add(folded)
    return dict(pairs)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(body: bytes, what: str) -> Any:
    """The document as Go's encoding/json would read it, or refused: UTF-8 only (Python's json
    would also take UTF-16 and a byte-order mark), no NaN or Infinity, no keys that differ only
    in case."""
    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=_no_case_twins, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise refused(f"The image's {what} is not JSON that vmjudge reads ({str(exc)[:200]}): {REBUILD}.") from None


def field(doc: Any, key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(doc, dict) or not isinstance(doc.get(key), kind) or isinstance(doc.get(key), bool):
        raise refused(f"The image's {what} has no {key} of the right type: {REBUILD}.")
    return doc[key]


def _check_digest(expected: str, actual: str, what: str) -> None:
    if expected != actual:
        raise refused(f"The image's {what} does not match its digest ({expected} named, {actual} found): the "
                      f"archive is damaged or was altered; {REBUILD}.")


def _named_digest(member: str) -> str | None:
    """The digest a member's name gives it: blobs/sha256/<hex>, or docker save's <hex>.json."""
    match = re.fullmatch(r"blobs/sha256/([0-9a-f]{64})|([0-9a-f]{64})\.json", member)
    return None if match is None else "sha256:" + (match.group(1) or match.group(2))


# Each layer as a layout names it: its member, the blob's digest if named, its media type if named.
Refs = list[tuple[str, str | None, str | None]]


def _docker(cat: Catalogue) -> tuple[Any, str, None, Refs]:
    manifest, _ = cat.document("manifest.json", "manifest.json")
    if not isinstance(manifest, list) or len(manifest) != 1:
        count = len(manifest) if isinstance(manifest, list) else 0
        raise refused(f"The image archive holds {count} images, and an entry is one image: save only the image to "
                      "run (`docker save app:tag`) and submit again.")
    item = manifest[0]
    config_name = field(item, "Config", str, "manifest.json")
    names = field(item, "Layers", list, "manifest.json")
    if isinstance(item, dict) and item.get("LayerSources"):
        raise refused(f"The image has foreign layers (LayerSources), which must be downloaded: {REBUILD}.")
    if not all(isinstance(n, str) for n in names):
        raise refused(f"The image's manifest.json lists a layer that is not a member's name: {REBUILD}.")
    config, digest = cat.document(config_name, "config")
    if (named := _named_digest(cat.resolve(config_name, "config"))) is not None:
        _check_digest(named, digest, "config")
    layers: Refs = [(member := cat.resolve(n, "layer"), _named_digest(member), None) for n in names]
    return config, digest, None, layers


def _descriptor(doc: Any, what: str) -> tuple[str, str, int]:
    media = field(doc, "mediaType", str, what)
    digest = field(doc, "digest", str, what)
    size = field(doc, "size", int, what)
    if not DIGEST.fullmatch(digest):
        raise refused(f"The image's {what} names the digest {digest[:80]!r}, and vmjudge reads sha256 digests only: "
                      f"{REBUILD}.")
    return media, digest, size


def _blob(cat: Catalogue, digest: str, size: int, what: str) -> str:
    member = cat.resolve("blobs/sha256/" + digest.removeprefix("sha256:"), what)
    if cat.headers[member].size != size:
        raise refused(f"The image's {what} is {cat.headers[member].size:,} bytes where its descriptor says {size:,}: "
                      f"the archive is damaged or was altered; {REBUILD}.")
    return member


def _oci(cat: Catalogue) -> tuple[Any, str, str, Refs]:
    layout, _ = cat.document("oci-layout", "oci-layout")
    if not str(field(layout, "imageLayoutVersion", str, "oci-layout")).startswith("1."):
        raise refused(f"The image's OCI layout is of a version vmjudge does not read: {REBUILD}.")
    index, _ = cat.document("index.json", "index.json")
    manifests = field(index, "manifests", list, "index.json")
    if len(manifests) != 1:
        raise refused(f"The image archive holds {len(manifests)} images, and an entry is one image: save only the "
                      "image to run and submit again.")
    media, digest, size = _descriptor(manifests[0], "index.json")
    if media in INDEX_TYPES:
        raise refused("The image archive holds an image index (an image for several platforms): save the linux/amd64 "
                      "image alone (`docker save --platform linux/amd64`) and submit again.")
    if media not in MANIFEST_TYPES:
        raise refused(f"The image's index.json names a manifest of type {media[:80]!r}, which is not an image "
                      f"manifest: {REBUILD}.")
    manifest, manifest_digest = cat.document(_blob(cat, digest, size, "manifest"), "manifest")
    _check_digest(digest, manifest_digest, "manifest")
    _, config_digest, config_size = _descriptor(field(manifest, "config", dict, "manifest"), "manifest's config")
    config, found = cat.document(_blob(cat, config_digest, config_size, "config"), "config")
    _check_digest(config_digest, found, "config")
    layers: Refs = []
    for desc in field(manifest, "layers", list, "manifest"):
        media, digest, size = _descriptor(desc, "manifest's layer")
        if isinstance(desc, dict) and desc.get("urls"):
            raise refused(f"The image has a layer to be downloaded from elsewhere (urls): {REBUILD}.")
        layers.append((_blob(cat, digest, size, "layer"), digest, media))
    return config, config_digest, manifest_digest, layers


def outer_bound(max_members: int, max_unpacked: int) -> int:
    """What the archive's own members may declare, which bounds the decompression a gzipped one
    can cost: the layers' files with a header and padding (1 KiB at most) for each, and the
    documents beside them."""
    return max_unpacked + 1024 * max_members + DOCS_TOTAL


def resolve(cat: Catalogue, gzipped: bool) -> ImageLayout:
    """The one image the archive holds, from its headers and documents alone (see the module's
    docstring)."""
    if "manifest.json" in cat.headers:
        fmt, (config, config_digest, manifest_digest, refs) = "docker-archive", _docker(cat)
    elif all(n in cat.headers for n in OCI_LAYOUT_NAMES):
        fmt, (config, config_digest, manifest_digest, refs) = "oci-archive", _oci(cat)
    else:
        raise refused("The archive holds no image: neither manifest.json (docker save) nor oci-layout and index.json "
                      "(an OCI archive); save the image with `docker save` or `podman save` and submit again.")
    if not isinstance(config, dict):
        raise refused(f"The image's config is not a JSON object: {REBUILD}.")
    diff_ids = field(field(config, "rootfs", dict, "config"), "diff_ids", list, "config's rootfs")
    if len(refs) != len(diff_ids) or not all(isinstance(d, str) and DIGEST.fullmatch(d) for d in diff_ids):
        raise refused(f"The image's config lists {len(diff_ids)} layer digests for its {len(refs)} layers: {REBUILD}.")
    if not refs:
        raise refused("The image has no layers, so no files to run: build it from a base image and submit again.")
    if len(refs) > MAX_LAYERS:
        raise refused(f"The image has {len(refs)} layers, more than the {MAX_LAYERS} vmjudge unpacks: squash some "
                      "(fewer RUN steps, or a multi-stage build) and submit again.")
    layers = tuple(LayerRef(member, digest, diff_id, media) for (member, digest, media), diff_id in zip(refs, diff_ids,
                                                                                                      strict=True))
    return ImageLayout(fmt, gzipped, config, config_digest, manifest_digest, layers, cat.stored, len(cat.headers))
