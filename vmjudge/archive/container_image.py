"""What `submit` checks of a container entry, an image archive as `docker save` or `podman save`
writes it, without Docker and without unpacking it: the archive read once (image_reading.py),
its documents resolved (image_layout.py) and every layer read through (image_layers.py), all of
it at a bounded cost whatever the archive declares, and every tar read as Go's archive/tar reads
it (image_tar.py), so that skopeo and umoci unpack the image that was checked.

What is refused is refused in one sentence the participant can act on: an image for another
machine (the judge runs linux/amd64), more than one image, damage or digests that do not match,
and anything in a layer that no image tool writes (image_layers.py says what). What is kept but
not run as it is (device nodes, setuid bits) is counted here and taken out when the entry's root
is made (images/entry_root.py). The result names the image twice over: `image_id`, the sha256
of its config (Docker's image ID: the same image saved by another tool may differ), and
`root_id`, the OCI chain ID of its layers, which names the root file system alone and is the
same however the image was saved: the judge keeps one root per chain ID.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EntryError, VmjudgeError
from .bounded import host_error
from .image_layers import LayerFacts
from .image_layout import REBUILD, ImageLayout, field, refused
from .image_reading import read_image
from .image_tar import TarRefused

DRYRUN_LABEL = "org.vmjudge.dryrun"
NOT_SET = ("", "0", "false", "no")  # label values that do not ask for a dry run


@dataclass(frozen=True)
class ImageConfig:
    """What the image says about running it (its config's config): the command is the
    entrypoint followed by cmd, unless the challenge names its own."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    workdir: str = ""
    user: str = ""

    @property
    def command(self) -> tuple[str, ...]:
        return self.entrypoint + self.cmd

    def as_dict(self) -> dict[str, Any]:
        return {"entrypoint": list(self.entrypoint), "cmd": list(self.cmd), "env": list(self.env),
                "workdir": self.workdir, "user": self.user}


@dataclass(frozen=True)
class CheckedImage:
    """An image archive that passed admission: what prep needs to make its root, and what the
    manifest records of it."""

    format: str  # skopeo's transport: "docker-archive" or "oci-archive"
    gzipped: bool  # the outer tar
    image_id: str  # "sha256:…" of the config
    manifest_digest: str | None  # "sha256:…" of the OCI manifest; docker save has none
    root_id: str  # "sha256:…", the chain ID of the layers: the root file system's name
    layers: tuple[LayerFacts, ...]
    config: ImageConfig
    architecture: str
    os: str
    stored_bytes: int  # what the outer tar's members hold (uncompressed, as skopeo reads them)
    unpacked_bytes: int  # what the layers' regular files declare, all layers together
    members: int
    devices: int  # device nodes and FIFOs in the layers, which the root is made without
    setid: int  # setuid or setgid members, whose bits the root is made without
    dry_run: bool  # the config's label org.vmjudge.dryrun asks for a dry run

    def as_dict(self) -> dict[str, Any]:
        return {"format": self.format, "image_id": self.image_id, "manifest_digest": self.manifest_digest,
                "root_id": self.root_id, "layers": [layer.digest for layer in self.layers],
                "config": self.config.as_dict(), "architecture": self.architecture, "os": self.os,
                "unpacked_bytes": self.unpacked_bytes}


def chain_id(diff_ids: list[str]) -> str:
    """The OCI image spec's ChainID of a stack of layers (config.md): each layer's name folded
    into the one below it, so that it names the whole stack in order."""
    chain = diff_ids[0]
    for diff_id in diff_ids[1:]:
        chain = "sha256:" + hashlib.sha256(f"{chain} {diff_id}".encode()).hexdigest()
    return chain


def _strings(doc: dict[str, Any], key: str) -> tuple[str, ...]:
    value = doc.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and "\0" not in v for v in value):
        raise refused(f"The image's config has a {key} that is not a list of strings: {REBUILD}.")
    return tuple(value)


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key) or ""
    if not isinstance(value, str) or "\0" in value:
        raise refused(f"The image's config has a {key} that is not a string: {REBUILD}.")
    return value


def read_config(config: dict[str, Any]) -> tuple[ImageConfig, bool]:
    """The run settings and whether the image asks for a dry run."""
    architecture, os_ = config.get("architecture"), config.get("os")
    if architecture != "amd64" or os_ != "linux":
        raise refused(f"The image is built for {str(os_)[:40]}/{str(architecture)[:40]}, and the judge runs "
                      "linux/amd64 (x86-64) images: build it with `--platform linux/amd64`, save it and submit again.")
    run = config.get("config") or {}
    if not isinstance(run, dict):
        raise refused(f"The image's config has a config that is not a JSON object: {REBUILD}.")
    env = _strings(run, "Env")
    if not all("=" in v for v in env):
        raise refused(f"The image's config has an Env entry without '=': {REBUILD}.")
    labels = run.get("Labels") or {}
    if not isinstance(labels, dict):
        raise refused(f"The image's config has Labels that are not a JSON object: {REBUILD}.")
    dry = labels.get(DRYRUN_LABEL)
    dry_run = isinstance(dry, str) and dry.strip().lower() not in NOT_SET
    return ImageConfig(_strings(run, "Entrypoint"), _strings(run, "Cmd"), env, _text(run, "WorkingDir"),
                       _text(run, "User")), dry_run


@dataclass(frozen=True)
class ImageLimits:
    """How big an image may be: files in its layers (and members of its archive), and the bytes
    its regular files declare; its layers are at most image_layout.MAX_LAYERS."""

    max_members: int = 500_000
    max_unpacked: int = 8 << 30


def _read(path: Path, limits: ImageLimits) -> tuple[ImageLayout, ImageConfig, bool, tuple[LayerFacts, ...]]:
    """The image read and resolved, and its config's run settings."""
    found = read_image(path, limits.max_members, limits.max_unpacked)
    config, dry_run = read_config(found.layout.config)
    return found.layout, config, dry_run, found.layers


def check_image(path: Path, limits: ImageLimits = ImageLimits(), name: str | None = None) -> CheckedImage:
    """The image archive at `path` checked through (see the module's docstring); `name` is what
    the participant called it (the spool's own name is a hash). A refusal is an EntryError
    ("bad-image", or "bad-archive" for a tar that cannot be read); the host's own read errors are
    a VmjudgeError saying so."""
    shown = name or path.name
    try:
        layout, config, dry_run, layers = _read(path, limits)
    except EntryError:
        raise
    except TarRefused as exc:
        raise EntryError("bad-archive", f"{shown} is not a readable image archive: it holds {exc}; {REBUILD}.") from exc
    except Exception as exc:
        host = host_error(exc)
        if isinstance(host, OSError):
            raise VmjudgeError(f"cannot read {path} ({host.strerror or host}): check the disk and submit "
                               "again.") from exc
        if host is not None:
            raise
        said = str(exc).replace(str(path), shown)[:200] or type(exc).__name__
        raise EntryError("bad-archive", f"{shown} is not a readable image archive ({said}): {REBUILD}.") from exc
    return CheckedImage(
        format=layout.format, gzipped=layout.gzipped, image_id=layout.config_digest,
        manifest_digest=layout.manifest_digest, root_id=chain_id([x.diff_id for x in layers]), layers=tuple(layers),
        config=config, architecture=str(field(layout.config, "architecture", str, "config")),
        os=str(field(layout.config, "os", str, "config")), stored_bytes=layout.stored_bytes,
        unpacked_bytes=sum(x.unpacked for x in layers), members=layout.members + sum(x.members for x in layers),
        devices=sum(x.devices for x in layers), setid=sum(x.setid for x in layers), dry_run=dry_run)
