"""What `vmjudge challenge add` records so that every host judges a challenge with the same
bits."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..config import Challenge, Site
from ..config.fingerprint import fingerprint
from ..errors import VmjudgeError
from ..images.image import GuestImage
from ..queue.db import Queue
from ..supervisor.environment import images_sha256, what_differs


def register(site: Site, queue: Queue, ch: Challenge, images: Sequence[GuestImage], replace: bool) -> str:
    """Register the challenge with the hashes of its files and images (one per recipe, in the
    order of Challenge.recipes); with several hosts, a copy of one already registered is
    recorded as this host's when it holds the same bits, and refused (unless `replace`: this
    copy becomes the one every host must have) when not. Returns what was done, for the organiser."""
    data, image_sha256 = fingerprint(ch.directory), images_sha256(images)
    registered = next((r for r in queue.challenges() if r["name"] == ch.name), None) if queue.shared else None
    if registered is not None and registered["data_sha256"] and not replace:
        differ = what_differs(registered, data, image_sha256, len(images))
        if differ:
            raise VmjudgeError(f"{ch.name} is registered in the shared queue with other files than {ch.directory} "
                               f"({'; '.join(differ)}): copy the challenge from the host that registered it, or "
                               "give --replace to make this copy the one every host must have.")
        queue.add_copy(ch.name, ch.directory)
        return f"this host's copy of {ch.name} at {ch.directory} matches the one registered"
    queue.add_challenge(ch.name, ch.directory, images[0].key, gpu=ch.vm.gpu,
                        data_sha256=json.dumps(data, sort_keys=True), image_sha256=image_sha256)
    return f"registered {ch.name}"

