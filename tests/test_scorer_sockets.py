"""The dice scorer over a socket challenge's results: each record's mask is the image the case left
for [score] socket, by the same rules as a style-files mask. The results go through the archive's
encode and decode first, as stage 4 reads them, so the "RECORD/SLUG" round trip is tested too."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmjudge.config import ScoreOptions
from vmjudge.errors import ScoringError
from vmjudge.queue.results import ExamResults, decode, encode
from vmjudge.scorers.builtin import dice
from vmjudge.scorers.loader import load_scorer
from vmjudge.scorers.mha import write_mha

TRUTH = bytes([0, 1, 1, 0, 0, 0, 1, 0])  # a 2x2x2 mask: 3 foreground voxels
OTHER = bytes([1, 0, 0, 0, 0, 0, 0, 0])  # disjoint from TRUTH
SOCKET = ScoreOptions(socket="tumour-mask")


def mask(voxels: bytes, shape: tuple[int, ...] = (2, 2, 2)) -> bytes:
    return write_mha(shape, "MET_UCHAR", voxels)


def reference(tmp_path: Path, *records: str) -> Path:
    ref = tmp_path / "reference"
    ref.mkdir()
    for record in records:
        (ref / f"REFERENCE-{record}.mha").write_bytes(mask(TRUTH))
    return ref


def archived(records: tuple[str, ...], files: dict[str, bytes | None]) -> ExamResults:
    """Socket results as the exam archives them ("RECORD/SLUG" keys) and stage 4 reads them back."""
    statuses = {r: ("ok" if files.get(f"{r}/tumour-mask") is not None else "error") for r in records}
    return decode(encode(records, statuses, "sockets", files=files))


def test_a_perfect_a_missing_and_a_wrong_size_mask(tmp_path):
    ref = reference(tmp_path, "perfect", "missing", "absent", "wrong-size")
    results = archived(("perfect", "missing", "absent", "wrong-size"), {
        "perfect/tumour-mask": mask(TRUTH),
        "missing/tumour-mask": None,  # the case failed: the exam archives null
        # "absent" left nothing at all for the socket: no key
        "wrong-size/tumour-mask": mask(TRUTH * 2, (2, 2, 4)),
    })
    assert results.outputs is not None and results.files is None
    assert results.outputs["perfect"]["tumour-mask"] == mask(TRUTH) and results.outputs["absent"] == {}
    got = dice.score(results, ref, SOCKET)
    assert got == {"score": 0.25, "dice_aggregated": 2 * 3 / (4 * 3 + 3), "records": 4.0, "failed": 2.0,
                   "undefined_records": 0.0}


def test_the_same_masks_score_the_same_as_style_files(tmp_path):
    ref = reference(tmp_path, "a", "b", "c")
    masks = {"a": mask(TRUTH), "b": mask(bytes([0, 1, 0, 0, 0, 0, 1, 1])), "c": None}
    as_files = dice.score(ExamResults(records=("a", "b", "c"), files=masks), ref)
    as_sockets = dice.score(archived(("a", "b", "c"), {f"{r}/tumour-mask": m for r, m in masks.items()}), ref, SOCKET)
    assert as_sockets == as_files and as_files["score"] == pytest.approx((1 + 2 * 2 / (3 + 3) + 0) / 3)


def test_only_the_score_socket_is_read(tmp_path):
    """A case's other outputs (another image, a value) do not reach the mask's score."""
    ref = reference(tmp_path, "a")
    results = archived(("a",), {"a/tumour-mask": mask(OTHER), "a/node-mask": mask(TRUTH), "a/volume": b"3"})
    assert dice.score(results, ref, SOCKET)["score"] == 0.0
    assert dice.score(results, ref, ScoreOptions(socket="node-mask"))["score"] == 1.0
    assert dice.score(results, ref, ScoreOptions(socket="volume"))["score"] == 0.0  # not a MetaImage: 0


def test_the_loader_passes_the_challenges_socket(tmp_path):
    ref = reference(tmp_path, "a")
    results = archived(("a",), {"a/tumour-mask": mask(TRUTH)})
    assert load_scorer("dice", SOCKET)(results, ref)["score"] == 1.0


def test_socket_results_without_a_socket_to_read_are_refused(tmp_path):
    ref = reference(tmp_path, "a")
    with pytest.raises(ScoringError, match=r"set \[score\] socket"):
        dice.score(archived(("a",), {"a/tumour-mask": mask(TRUTH)}), ref)


def test_answer_lines_are_still_refused(tmp_path):
    with pytest.raises(ScoringError, match="expects the masks, one per record .* hold answer lines"):
        dice.score(ExamResults(records=("a",), answers={"a": "x"}), reference(tmp_path, "a"), SOCKET)
