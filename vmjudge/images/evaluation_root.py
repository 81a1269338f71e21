"""The root of a challenge's evaluation image ([score] kind = "container"): checked by the admission
entries' images pass, and made by the same tools into the same content-addressed store
(entry_root.py), so that it is unpacked once, at `challenge add`, and found made by every stage 4.

The image is the organiser's, not an entry's: what admission refuses in it is the challenge's
fault, said at `challenge add` as a ChallengeError (one sentence, nothing registered), and at
stage 4 (a store that lost the root makes it again) the same sentence holds the entry for the
organiser rather than failing it.

Admission reads the whole archive (gigabytes, for a model's image), and the root is found by what
it found: so what it found is kept (Layout.evaluation_check) with the archive's stat signature
(inode, size, mtime, ctime), and a stage 4 whose archive has the same signature, and whose root is
still made, reads none of it. An archive replaced or written since, or a memo that cannot be read,
is checked again in full.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from ..archive.container_image import CheckedImage, ImageConfig, ImageLimits, check_image
from ..config.evaluation import EvaluationRules
from ..config.layout import Layout
from ..errors import ChallengeError, EntryError
from ..files import durable_write, stat_signature
from .entry_root import RULES, EntryRoot, entry_root, made_root


def evaluation_root(layout: Layout, rules: EvaluationRules) -> EntryRoot:
    """The evaluation image's root, made or found; ChallengeError when the image is missing,
    larger than [score] allows, or refused by admission."""
    image_path = rules.image
    try:
        before = stat_signature(image_path)  # inode, size, mtime, ctime
    except OSError as exc:
        raise ChallengeError("evaluation-image", f"the evaluation image {image_path} cannot be read ({exc.strerror}): "
                             "save it there (docker save IMAGE | gzip -c > FILE) or correct [score] image.") from None
    if (size := before[1]) > rules.max_size:
        raise ChallengeError("evaluation-image", f"the evaluation image {image_path} is {size:,} bytes, more than "
                             f"[score] max_size ({rules.max_size:,}): raise it or make the image smaller.")
    memo = layout.evaluation_check(image_path)
    known = _known(layout, memo, before, rules)
    if known is not None:
        return known
    try:
        checked = check_image(image_path, ImageLimits(max_unpacked=rules.max_unpacked), name=str(image_path))
        root = entry_root(layout, image_path, checked, rules.max_unpacked)
    except EntryError as exc:  # what would refuse an entry's image refuses the organiser's
        raise ChallengeError("evaluation-image", f"the evaluation image {Path(image_path).name} is refused: "
                             f"{exc}") from None
    if stat_signature(image_path) == before:  # not written while it was read: what was found holds for it
        with contextlib.suppress(OSError):  # a memo not written costs the next stage a reading, nothing more
            _remember(memo, before, checked)
    return root


def _known(layout: Layout, memo: Path, signature: list[int], rules: EvaluationRules) -> EntryRoot | None:
    """The root admission's last reading of this very archive found, if it is still made."""
    try:
        doc = json.loads(memo.read_text())
        if doc["signature"] != signature or doc["rules"] != RULES or doc["unpacked_bytes"] > rules.max_unpacked:
            return None
        kept = doc["config"]
        config = ImageConfig(tuple(kept["entrypoint"]), tuple(kept["cmd"]), tuple(kept["env"]), str(kept["workdir"]),
                             str(kept["user"]))
        return made_root(layout, str(doc["root_id"]), str(doc["image_id"]), config)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # never read, or not readable: the archive is read again


def _remember(memo: Path, signature: list[int], checked: CheckedImage) -> None:
    memo.parent.mkdir(parents=True, exist_ok=True)
    doc = {"signature": signature, "rules": RULES, "root_id": checked.root_id, "image_id": checked.image_id,
           "config": checked.config.as_dict(), "unpacked_bytes": checked.unpacked_bytes}
    durable_write(memo, [json.dumps(doc).encode()], sync_dir=False)
