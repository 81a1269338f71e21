"""The root of a challenge's evaluation image ([score] kind = "container"): checked by the admission
entries' images pass, and made by the same tools into the same content-addressed store
(entry_root.py), so that it is unpacked once, at `challenge add`, and found made by every stage 4.

The image is the organiser's, not an entry's: what admission refuses in it is the challenge's
fault, said at `challenge add` as a ChallengeError (one sentence, nothing registered), and at
stage 4 (a store that lost the root makes it again) the same sentence holds the entry for the
organiser rather than failing it.
"""

from __future__ import annotations

from pathlib import Path

from ..archive.container_image import ImageLimits, check_image
from ..config.evaluation import EvaluationRules
from ..config.layout import Layout
from ..errors import ChallengeError, EntryError
from .entry_root import EntryRoot, entry_root


def evaluation_root(layout: Layout, rules: EvaluationRules) -> EntryRoot:
    """The evaluation image's root, made or found; ChallengeError when the image is missing,
    larger than [score] allows, or refused by admission."""
    image_path = rules.image
    try:
        size = image_path.stat().st_size
    except OSError as exc:
        raise ChallengeError("evaluation-image", f"the evaluation image {image_path} cannot be read ({exc.strerror}): "
                             "save it there (docker save IMAGE | gzip -c > FILE) or correct [score] image.") from None
    if size > rules.max_size:
        raise ChallengeError("evaluation-image", f"the evaluation image {image_path} is {size:,} bytes, more than "
                             f"[score] max_size ({rules.max_size:,}): raise it or make the image smaller.")
    try:
        checked = check_image(image_path, ImageLimits(max_unpacked=rules.max_unpacked), name=str(image_path))
        return entry_root(layout, image_path, checked, rules.max_unpacked)
    except EntryError as exc:  # what would refuse an entry's image refuses the organiser's
        raise ChallengeError("evaluation-image", f"the evaluation image {Path(image_path).name} is refused: "
                             f"{exc}") from None
