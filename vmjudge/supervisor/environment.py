"""Which challenges this host may judge, when several hosts share the queue: those whose
local copy holds the files, and whose image the manifest, that the queue recorded when the
challenge was registered. A host with another copy would judge with other bits; it takes
none of that challenge's stages and says once, in one sentence, what differs.

Hashing a challenge's files takes a while, so each challenge is checked again only when its
registration changes (or its local copy moves), not at every claim.

With one host or several, a challenge whose [vm] cpu_level this host's guests do not reach is
left out the same way (cpu_gate.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import Site, load_challenge
from ..config.fingerprint import differences, fingerprint
from ..errors import VmjudgeError
from ..files import sha256_file
from ..images.build import find_image
from ..images.image import GuestImage
from ..queue.db import Queue
from .cpu_gate import CpuGate

log = logging.getLogger(__name__)


def manifest_sha256(image: GuestImage) -> str:
    """What the queue records of a challenge's image: the sha256 of its manifest.json, which
    pins every file's sha256."""
    return sha256_file(image.directory / "manifest.json")


def images_sha256(images: Sequence[GuestImage]) -> str:
    """What the queue records of a challenge's images (Challenge.recipes): the one image's
    manifest_sha256, as before contests had phases; for a contest whose phases run in images of
    their own, one sha256 over theirs, in the phases' order, so that the one column still
    holds off a host that lacks any of them."""
    hashes = [manifest_sha256(image) for image in images]
    return hashes[0] if len(hashes) == 1 else hashlib.sha256(" ".join(hashes).encode()).hexdigest()


def what_differs(registered: dict[str, Any], data: dict[str, str], image_sha256: str, images: int = 1) -> list[str]:
    """What differs between a registered challenge (a queue.challenges() row) and a copy with
    these part hashes and `images` images (images_sha256): the parts by name, then the images;
    empty when nothing does."""
    said = differences(json.loads(registered["data_sha256"]), data) if registered["data_sha256"] else []
    if registered["image_sha256"] and registered["image_sha256"] != image_sha256:
        what = "the image differs" if images == 1 else f"its phases' {images} images differ"
        said.append(f"{what} ({image_sha256[:12]} here, {registered['image_sha256'][:12]} registered: "
                    "copy it with `vmjudge image export` and `vmjudge image import`)")
    return said


def mismatch(site: Site, row: dict[str, Any]) -> str | None:
    """Why this host must not judge the registered challenge `row` (a queue.challenges() row),
    or None when its copy and image are those registered."""
    name, here = row["name"], Path(row["here"])
    if not here.is_dir():
        return (f"challenge {name}: this host has no copy at {here}: copy the challenge directory there, or run "
                "`vmjudge challenge add DIR` with where it is on this host")
    try:
        images = [find_image(site, recipe) for recipe in load_challenge(here).recipes]
    except VmjudgeError as exc:
        return f"challenge {name}: {exc}"
    differs = what_differs(row, fingerprint(here), images_sha256(images), len(images))
    if differs:
        return (f"challenge {name}: this host's copy at {here} is not the one registered ({'; '.join(differs)}): "
                "copy it again from the host that registered it")
    return None


class Environment:
    """The challenges whose stages this host may claim (None: all of them, with one host whose
    guests reach every challenge's CPU level)."""

    CHECK_EVERY = 30.0

    def __init__(self, site: Site, queue: Queue, cpu: CpuGate | None = None):
        self.site, self.queue = site, queue
        self.cpu = cpu or CpuGate(site)
        self._verdicts: dict[tuple, str | None] = {}
        self._allowed: tuple[str, ...] | None = None
        self._checked = float("-inf")
        self._said: set[str] = set()

    def _verdict(self, key: tuple, row: dict[str, Any]) -> str | None:
        """Why this host must not take the challenge's stages, or None; kept, unless it is a CPU
        level that libvirt has not yet confirmed, which is asked again at the next check."""
        why = mismatch(self.site, row) if self.queue.shared else None
        settled = True
        if why is None:
            why = self.cpu.shortfall(row["name"], row["here"])
            settled = why is None or self.cpu.known
        if why and why not in self._said:
            self._said.add(why)
            log.warning("%s; its stages are left to other hosts.", why)
        if settled:
            self._verdicts[key] = why
        return why

    def allowed(self) -> tuple[str, ...] | None:
        if time.monotonic() - self._checked >= self.CHECK_EVERY:
            self._checked = time.monotonic()
            allowed, left_out = [], False
            for row in self.queue.challenges():
                key = (row["name"], row["registered_at"], row["data_sha256"], row["image_sha256"], row["here"])
                why = self._verdicts[key] if key in self._verdicts else self._verdict(key, row)
                if why is None:
                    allowed.append(row["name"])
                left_out = left_out or why is not None
            self._allowed = tuple(allowed) if self.queue.shared or left_out else None
        return self._allowed
