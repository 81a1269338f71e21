"""Container image archives written from Python, without Docker: the tests' images.

`docker save` writes manifest.json, the image's config as <hex>.json and each layer as an
uncompressed <id>/layer.tar; `podman save --format oci-archive` (and skopeo's oci-archive:) an
OCI image layout: oci-layout, index.json and content-addressed blobs/sha256/<hex>. Both are
written here from layers made with tarfile, so a test can build exactly the image it needs,
the hostile ones included (members a well-behaved tool would never write), and say in a line
what the image holds.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def container_challenge(name: str) -> str:
    """challenge.toml of a small container challenge: images of up to 64 MiB, their submitted
    results at /submitted/RECORD.txt."""
    return (f'name = "{name}"\n[entry]\nkind = "container"\nmax_size = 67108864\nmax_unpacked = 67108864\n'
            '[container]\n[results]\nsubmitted = "/submitted/{record}.txt"\n')


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Members of a layer, as tarfile.TarInfo plus the data of a regular file.

@dataclass
class Member:
    info: tarfile.TarInfo
    data: bytes = b""


def _info(name: str, kind: bytes, mode: int, uid: int = 0, gid: int = 0) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.uid, ti.gid, ti.mtime = kind, mode, uid, gid, 1700000000
    return ti


def file(name: str, data: bytes = b"", mode: int = 0o644, uid: int = 0, gid: int = 0) -> Member:
    ti = _info(name, tarfile.REGTYPE, mode, uid, gid)
    ti.size = len(data)
    return Member(ti, data)


def directory(name: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> Member:
    return Member(_info(name, tarfile.DIRTYPE, mode, uid, gid))


def symlink(name: str, target: str) -> Member:
    ti = _info(name, tarfile.SYMTYPE, 0o777)
    ti.linkname = target
    return Member(ti)


def hardlink(name: str, target: str) -> Member:
    ti = _info(name, tarfile.LNKTYPE, 0o644)
    ti.linkname = target
    return Member(ti)


def device(name: str, kind: str = "c", major: int = 1, minor: int = 3) -> Member:
    ti = _info(name, tarfile.CHRTYPE if kind == "c" else tarfile.BLKTYPE, 0o666)
    ti.devmajor, ti.devminor = major, minor
    return Member(ti)


def fifo(name: str) -> Member:
    return Member(_info(name, tarfile.FIFOTYPE, 0o644))


def whiteout(path: str) -> Member:
    """The marker that removes `path` of the layers below."""
    parent, _, base = path.rpartition("/")
    return file(f"{parent}/.wh.{base}" if parent else f".wh.{base}")


def opaque(directory_path: str) -> Member:
    """The marker that hides everything the layers below hold in `directory_path`."""
    return file(f"{directory_path}/.wh..wh..opq" if directory_path else ".wh..wh..opq")


def layer_tar(members: list[Member], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """The uncompressed layer: the members in order (duplicates and all, as given)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tf:
        for m in members:
            tf.addfile(m.info, io.BytesIO(m.data) if m.info.isreg() else None)
    return out.getvalue()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)


@dataclass
class Layer:
    """One layer as the archive carries it: `blob` as stored, `diff_id` the digest of its
    uncompressed tar (what the config's rootfs.diff_ids lists), `media_type` as a manifest names it."""

    blob: bytes
    diff_id: str
    media_type: str

    @classmethod
    def of(cls, members: list[Member], compression: str | None = "gzip") -> Layer:
        raw = layer_tar(members)
        return cls.raw(raw, compression)

    @classmethod
    def raw(cls, tar: bytes, compression: str | None = "gzip") -> Layer:
        if compression == "gzip":
            return cls(gz(tar), "sha256:" + sha256(tar), LAYER_GZIP)
        if compression == "zstd":  # the magic number and no more: it is refused before any decompression
            return cls(ZSTD_MAGIC + b"\0" * 64, "sha256:" + sha256(tar), LAYER_ZSTD)
        return cls(tar, "sha256:" + sha256(tar), LAYER_TAR)


@dataclass
class Image:
    layers: list[Layer]
    entrypoint: list[str] | None = None
    cmd: list[str] | None = field(default_factory=lambda: ["/bin/sh"])
    env: list[str] = field(default_factory=lambda: ["PATH=/usr/local/bin:/usr/bin:/bin"])
    workdir: str = ""
    user: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    architecture: str = "amd64"
    os: str = "linux"
    diff_ids: list[str] | None = None  # as the layers say, unless a test lies

    def config(self) -> bytes:
        doc: dict[str, Any] = {
            "architecture": self.architecture, "os": self.os, "created": "2026-01-01T00:00:00Z",
            "config": {"Env": self.env, "Cmd": self.cmd, "Entrypoint": self.entrypoint,
                       "WorkingDir": self.workdir, "User": self.user, "Labels": self.labels or None},
            "rootfs": {"type": "layers",
                       "diff_ids": self.diff_ids if self.diff_ids is not None else [x.diff_id for x in self.layers]},
            "history": [{"created_by": f"layer {i}"} for i in range(len(self.layers))]}
        return json.dumps(doc, sort_keys=True).encode()


def _outer(members: list[tuple[str, bytes]], compress: bool, links: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
            tf.addfile(ti, io.BytesIO(data))
        for name, target in (links or {}).items():
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname, ti.mtime = tarfile.SYMTYPE, target, 1700000000
            tf.addfile(ti)
    return gz(out.getvalue()) if compress else out.getvalue()


def docker_members(image: Image, tag: str = "entry:latest") -> list[tuple[str, bytes]]:
    """What `docker save` (before Docker 25) writes: layers as <id>/layer.tar, the config as <hex>.json."""
    config = image.config()
    members: list[tuple[str, bytes]] = []
    names = []
    for i, layer in enumerate(image.layers):
        layer_id = sha256(f"{i}:{layer.diff_id}".encode())
        names.append(f"{layer_id}/layer.tar")
        members += [(f"{layer_id}/VERSION", b"1.0"), (f"{layer_id}/json", json.dumps({"id": layer_id}).encode()),
                    (f"{layer_id}/layer.tar", layer.blob)]
    config_name = f"{sha256(config)}.json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": names}]
    members += [(config_name, config), ("manifest.json", json.dumps(manifest).encode()),
                ("repositories", json.dumps({tag.split(":")[0]: {tag.split(":")[1]: "x"}}).encode())]
    return members


def docker_save(path: Path, image: Image, compress: bool = False) -> Path:
    path.write_bytes(_outer(docker_members(image), compress))
    return path


def oci_manifest(image: Image) -> tuple[bytes, bytes]:
    """The image's config and its OCI manifest."""
    config = image.config()
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": "sha256:" + sha256(config), "size": len(config)},
                "layers": [{"mediaType": x.media_type, "digest": "sha256:" + sha256(x.blob), "size": len(x.blob)}
                           for x in image.layers]}
    return config, json.dumps(manifest).encode()


def oci_members(images: list[Image], platform: bool = True) -> list[tuple[str, bytes]]:
    """An OCI image layout holding `images`, each a manifest in index.json."""
    blobs: dict[str, bytes] = {}
    entries = []
    for image in images:
        config, manifest = oci_manifest(image)
        for blob in [config, manifest] + [x.blob for x in image.layers]:
            blobs[sha256(blob)] = blob
        entry: dict[str, Any] = {"mediaType": OCI_MANIFEST, "digest": "sha256:" + sha256(manifest),
                                 "size": len(manifest),
                                 "annotations": {"org.opencontainers.image.ref.name": "latest"}}
        if platform:
            entry["platform"] = {"architecture": image.architecture, "os": image.os}
        entries.append(entry)
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    return ([("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'), ("index.json", json.dumps(index).encode())]
            + [(f"blobs/sha256/{hex_}", blob) for hex_, blob in sorted(blobs.items())])


def oci_archive(path: Path, image: Image, compress: bool = False) -> Path:
    path.write_bytes(_outer(oci_members([image]), compress))
    return path


def write_members(path: Path, members: list[tuple[str, bytes]], compress: bool = False,
                  links: dict[str, str] | None = None) -> Path:
    """An archive of the given members (and symbolic links, name → target), for images no tool writes."""
    path.write_bytes(_outer(members, compress, links))
    return path


def docker25_members(image: Image, tag: str = "entry:latest") -> list[tuple[str, bytes]]:
    """What `docker save` writes since Docker 25: an OCI layout, and manifest.json naming the
    same blobs by their paths."""
    config, _ = oci_manifest(image)
    manifest = [{"Config": f"blobs/sha256/{sha256(config)}", "RepoTags": [tag],
                 "Layers": [f"blobs/sha256/{sha256(x.blob)}" for x in image.layers]}]
    return oci_members([image]) + [("manifest.json", json.dumps(manifest).encode())]


def sparse_layer(name: str, apparent: int) -> bytes:
    """A layer holding one file in the PAX 1.0 sparse format (GNU tar --sparse --posix): all hole,
    `apparent` bytes when unpacked, a few blocks in the tar."""
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime = 512, 1700000000
    ti.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": name,
                      "GNU.sparse.realsize": str(apparent)}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(ti, io.BytesIO(b"1\n0\n0\n".ljust(512, b"\0")))  # the map: one empty data region
    return out.getvalue()


def declared_layer(name: str, size: int) -> bytes:
    """A layer whose one file's header declares `size` bytes (a 10 GiB file of zeros), followed by
    the first megabyte of them: what a reader sees before it reads on."""
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime = size, 1700000000
    return ti.tobuf(tarfile.PAX_FORMAT) + bytes(1 << 20)


# Large images, written to disk as they are made: a layer of a GiB is never held in memory.

class _Hashing:
    """A file opened for writing that also hashes what goes through it (a layer's diff_id)."""

    def __init__(self, path: Path):
        self.file = open(path, "wb")  # noqa: SIM115 - closed by close(), which tarfile's caller calls
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.file.write(data)

    def tell(self) -> int:
        return self.file.tell()

    def close(self) -> None:
        self.file.close()


@dataclass
class LayerFile:
    """An uncompressed layer tar on disk and its diff_id."""

    path: Path
    diff_id: str

    @classmethod
    def write(cls, path: Path, add: Callable[[tarfile.TarFile], None]) -> LayerFile:
        """The layer whose members `add` adds to the tar it is given."""
        out = _Hashing(path)
        try:
            with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:  # type: ignore[call-overload]
                add(tf)
        finally:
            out.close()
        return cls(path, "sha256:" + out.digest.hexdigest())


def docker_save_files(path: Path, layers: list[LayerFile], **config: Any) -> Path:
    """What `docker save` writes (as docker_save), the layers read from their files as the
    archive is written; `config` as Image takes it (cmd, env, labels, ...)."""
    image = Image([Layer(b"", x.diff_id, LAYER_TAR) for x in layers], **config)
    doc = image.config()
    names = []
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        def put(name: str, data: bytes) -> None:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
            tf.addfile(ti, io.BytesIO(data))
        for i, layer in enumerate(layers):
            layer_id = sha256(f"{i}:{layer.diff_id}".encode())
            names.append(f"{layer_id}/layer.tar")
            put(f"{layer_id}/VERSION", b"1.0")
            put(f"{layer_id}/json", json.dumps({"id": layer_id}).encode())
            ti = tf.gettarinfo(str(layer.path), arcname=f"{layer_id}/layer.tar")
            ti.mode, ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0o644, 1700000000, 0, 0, "", ""
            with open(layer.path, "rb") as f:
                tf.addfile(ti, f)
        config_name = f"{sha256(doc)}.json"
        put(config_name, doc)
        put("manifest.json", json.dumps([{"Config": config_name, "RepoTags": ["entry:latest"],
                                          "Layers": names}]).encode())
    return path
