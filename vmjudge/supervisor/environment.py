"""Which challenges this host may judge, when several hosts share the queue: those whose
local copy holds the files, and whose image the manifest, that the queue recorded when the
challenge was registered. A host with another copy would judge with other bits; it takes
none of that challenge's stages and says once, in one sentence, what differs.

Hashing a challenge's files takes a while, so each challenge is checked again only when its
registration changes (or its local copy moves), not at every claim.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from ..config import Site, load_challenge
from ..config.fingerprint import differences, fingerprint
from ..errors import VmjudgeError
from ..files import sha256_file
from ..images.build import find_image
from ..images.image import GuestImage
from ..queue.db import Queue

log = logging.getLogger(__name__)


def manifest_sha256(image: GuestImage) -> str:
    """What the queue records of a challenge's image: the sha256 of its manifest.json, which
    pins every file's sha256."""
    return sha256_file(image.directory / "manifest.json")


def what_differs(registered: dict[str, Any], data: dict[str, str], image_sha256: str) -> list[str]:
    """What differs between a registered challenge (a queue.challenges() row) and a copy with
    these part hashes and image: the parts by name, then the image; empty when nothing does."""
    said = differences(json.loads(registered["data_sha256"]), data) if registered["data_sha256"] else []
    if registered["image_sha256"] and registered["image_sha256"] != image_sha256:
        said.append(f"the image differs ({image_sha256[:12]} here, {registered['image_sha256'][:12]} registered: "
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
        image = find_image(site, load_challenge(here).image)
    except VmjudgeError as exc:
        return f"challenge {name}: {exc}"
    differs = what_differs(row, fingerprint(here), manifest_sha256(image))
    if differs:
        return (f"challenge {name}: this host's copy at {here} is not the one registered ({'; '.join(differs)}): "
                "copy it again from the host that registered it")
    return None


class Environment:
    """The challenges whose stages this host may claim (None: all of them, with one host)."""

    CHECK_EVERY = 30.0

    def __init__(self, site: Site, queue: Queue):
        self.site, self.queue = site, queue
        self._verdicts: dict[tuple, str | None] = {}
        self._allowed: tuple[str, ...] = ()
        self._checked = float("-inf")

    def allowed(self) -> tuple[str, ...] | None:
        if not self.queue.shared:
            return None
        if time.monotonic() - self._checked >= self.CHECK_EVERY:
            self._checked = time.monotonic()
            allowed = []
            for row in self.queue.challenges():
                key = (row["name"], row["registered_at"], row["data_sha256"], row["image_sha256"], row["here"])
                if key not in self._verdicts:
                    self._verdicts[key] = why = mismatch(self.site, row)
                    if why:
                        log.warning("%s; its stages are left to other hosts.", why)
                if self._verdicts[key] is None:
                    allowed.append(row["name"])
            self._allowed = tuple(allowed)
        return self._allowed
