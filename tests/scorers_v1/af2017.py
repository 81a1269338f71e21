# af2017 as released at VERSION 1 (vmjudge commit 3354a3c, unchanged until 531df2e), kept verbatim
# below this header so that a test can score with it and rescore with VERSION 2.
"""Built-in scorer "af2017" (PhysioNet/CinC 2017, AF classification from a short single-lead
ECG). Per-class F1 keeps the rare classes (AF, noise) from being drowned by the normal one."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from vmjudge.queue.results import ExamResults
from vmjudge.scorers.answers import answers_of
from vmjudge.scorers.parts import ratio
from vmjudge.scorers.reference import read_reference_csv, reference_rows

VERSION = 1  # bump whenever a rule below changes; scorer_version() records it

CLASSES: tuple[str, ...] = ("N", "A", "O", "~")


def score(results: ExamResults, reference: Path) -> dict[str, float]:
    """{"F1_N", "F1_A", "F1_O", "F1_noise", "score", "score_4class"}.

    F1 of a class = 2·correct / (reference count + answer count), 0 when both counts are 0.
    score = mean(F1_N, F1_A, F1_O), the final 2017 ranking; score_4class also averages
    F1_noise (the formula of the challenge page). A missing answer, or one that is not
    exactly N, A, O or ~ (case matters), counts as ~ (too noisy to classify)."""
    answer = answers_of(results, "af2017")
    table = read_reference_csv(reference, (CLASSES,), "\"RECORD,LABEL\" with LABEL N, A, O or ~")
    in_reference: Counter[str] = Counter()
    in_answers: Counter[str] = Counter()
    correct: Counter[str] = Counter()
    for record, (label,) in reference_rows(results, table, reference):
        given = answer(record)
        given = given if given in CLASSES else "~"
        in_reference[label] += 1
        in_answers[given] += 1
        if given == label:
            correct[label] += 1
    f1 = {c: ratio(2 * correct[c], in_reference[c] + in_answers[c]) for c in CLASSES}
    return {"F1_N": f1["N"], "F1_A": f1["A"], "F1_O": f1["O"], "F1_noise": f1["~"],
            "score": (f1["N"] + f1["A"] + f1["O"]) / 3, "score_4class": sum(f1.values()) / 4}
