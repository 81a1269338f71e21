"""Built-in scorer "dice": segmentation masks compared with the reference by the Dice similarity
coefficient, as HECKTOR and most segmentation challenges score them. Each record's answer is a
MetaImage file (scorers/mha.py) the size of the record's reference mask, REFERENCE-RECORD.mha in
the reference directory (so named that a training set can hold them beside the records' own files,
which are RECORD.*, without an entry receiving them); a voxel other than 0 is foreground.

Dice = 2|A∩B| / (|A| + |B|) per record; the score is its mean over the test records. A record
with no mask, one that cannot be read, or one of another size than its reference scores 0 (a
failed record, as a failed classification scores as a wrong answer). A record whose reference
and answer are both empty is 0/0: reported in `undefined_records`, and [score] undefined decides
("omit" leaves it out of the mean, "zero" counts it as 0). Also reported: the aggregated Dice
(HECKTOR 2022's DSCagg: intersections and volumes summed over the records first).

A challenge with sockets (Grand Challenge's way) gives each record's mask as the image the case left
for the [score] socket (ExamResults.outputs); the rules are the same, so the same masks score the same
whichever way an entry delivered them. Only MetaImage is read: an image socket's .tif is an
unreadable mask, scoring 0 like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vmjudge.config import DEFAULT_SCORE_OPTIONS, ScoreOptions
from vmjudge.errors import ScoringError
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.answers import files_of
from vmjudge.scorers.mha import MhaError, read_mha
from vmjudge.scorers.parts import mean_of_parts, part

VERSION = 1  # bump whenever a rule below changes; scorer_version() records it


def reference_mask(reference: Path, record: str) -> tuple[tuple[int, ...], bytes]:
    path = reference / f"REFERENCE-{record}.mha"
    try:
        volume = read_mha(path.read_bytes())
    except OSError as exc:
        raise ScoringError(f"The reference mask {path} cannot be read ({exc.strerror or exc}): each test record "
                           "needs its REFERENCE-RECORD.mha in the reference directory.") from exc
    except MhaError as exc:
        raise ScoringError(f"The reference mask {path} is not a MetaImage volume vmjudge reads: {exc}.") from exc
    return volume.shape, volume.foreground()


def overlap(reference: bytes, answer: bytes | None, shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(|A∩B|, |A|, |B|), the answer being empty when it is missing, unreadable or of another shape."""
    truth = reference.count(1)
    if answer is None:
        return 0, truth, 0
    try:
        found = read_mha(answer, shape).foreground()  # read to the reference's size, whatever it declares
    except MhaError:
        return 0, truth, 0
    both = int.from_bytes(reference, "little") & int.from_bytes(found, "little")
    return bin(both).count("1"), truth, found.count(1)


def answer_masks(results: ExamResults, options: ScoreOptions) -> Mapping[str, bytes | None]:
    """Each record's mask bytes (scorers/answers.py files_of)."""
    return files_of(results, "dice", options, "the masks")


def score(results: ExamResults, reference: Path,
          options: ScoreOptions = DEFAULT_SCORE_OPTIONS) -> dict[str, float | None]:
    """{"score" (the mean Dice), "dice_aggregated", "records", "failed", "undefined_records"}."""
    masks = answer_masks(results, options)
    dice: list[float | None] = []
    failed = 0
    sums = [0, 0, 0]
    for record in results.records:
        shape, truth = reference_mask(reference, record)
        answer = masks.get(record)
        both, a, b = overlap(truth, answer, shape)
        failed += answer is None
        dice.append(part(2 * both, a + b))
        sums = [sums[0] + both, sums[1] + a, sums[2] + b]
    aggregated = part(2 * sums[0], sums[1] + sums[2])
    return {"score": float(mean_of_parts(dice, options)) if dice else 0.0, "dice_aggregated": aggregated,
            "records": float(len(dice)), "failed": float(failed),
            "undefined_records": float(sum(1 for d in dice if d is None))}
