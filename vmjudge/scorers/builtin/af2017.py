"""Built-in scorer "af2017" (PhysioNet/CinC 2017, AF classification from a short single-lead
ECG), after the official score2017Challenge.m (Chengyu Liu and Qiao Li, Jan 20 2017).
Per-class F1 keeps the rare classes (AF, noise) from being drowned by the normal one.

Where it differs from the official script, on purpose: answers are looked up by the exact
record name (the script's strmatch also takes a longer name that starts with it); a class
absent from both the reference and the answers has a null F1 ([score] undefined decides what
it does to score; the script gives NaN); an answer other than N, A, O or ~, which stops the
script, is refused or mapped to ~ as [score] invalid_answers says."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from vmjudge.config import DEFAULT_SCORE_OPTIONS, ScoreOptions
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.answers import answers_of, checked_answers
from vmjudge.scorers.parts import mean_of_parts, part
from vmjudge.scorers.reference import read_reference_csv, reference_rows

VERSION = 2  # bump whenever a rule below changes; scorer_version() records it
# 2: a 0/0 F1 is null; unknown answers follow [score] invalid_answers.

CLASSES: tuple[str, ...] = ("N", "A", "O", "~")


def answer_problem(label: str) -> str | None:
    """Why the official script would refuse this answer (None: it accepts it)."""
    return None if label in CLASSES else "not N, A, O or ~ (case matters)"


def score(results: ExamResults, reference: Path,
          options: ScoreOptions = DEFAULT_SCORE_OPTIONS) -> dict[str, float | None]:
    """{"F1_N", "F1_A", "F1_O", "F1_noise", "score", "score_4class"}.

    F1 of a class = 2·correct / (reference count + answer count). score = mean(F1_N, F1_A,
    F1_O), the final 2017 ranking (the script's F1); score_4class also averages F1_noise (the
    formula of the challenge page). A missing answer counts as ~ (too noisy to classify)."""
    answers_of(results, "af2017")  # results of the other style are refused before the reference is read
    table = read_reference_csv(reference, (CLASSES,), "\"RECORD,LABEL\" with LABEL N, A, O or ~")
    in_reference: Counter[str] = Counter()
    in_answers: Counter[str] = Counter()
    correct: Counter[str] = Counter()
    rows = reference_rows(results, table, reference)
    answer = checked_answers(results, "af2017", options, answer_problem, "~")
    for record, (label,) in rows:
        given = answer(record) or "~"
        in_reference[label] += 1
        in_answers[given] += 1
        if given == label:
            correct[label] += 1
    f1 = {c: part(2 * correct[c], in_reference[c] + in_answers[c]) for c in CLASSES}
    return {"F1_N": f1["N"], "F1_A": f1["A"], "F1_O": f1["O"], "F1_noise": f1["~"],
            "score": float(mean_of_parts([f1["N"], f1["A"], f1["O"]], options)),
            "score_4class": float(mean_of_parts(list(f1.values()), options))}
