"""Built-in scorer "youth_mental_health": DrivenData's Youth Mental Health Narratives challenge (2024),
as its runtime repository's src/scoring.py computes it (drivendataorg/youth-mental-health-runtime,
`average_f1`): F1 averaged over the 23 target variables, weighted by how many each stands for. The 21
binary variables give one macro-averaged F1 (sklearn's f1_score(average="macro") over them: each
column's F1 of the positive class 1, 0 where it has no true or predicted positive, then their mean),
weighted 21; the two categorical ones, InjuryLocationType and WeaponType1, each a micro-averaged F1
(for one label per row, the share of rows predicted right), weighted 1.

The reference is reference/test_labels.csv, with DrivenData's header (uid, then the 23 columns); the
entry's rows come from its submission.csv, whose format (every id, whole numbers, nothing missing)
stage 3 checked (stages/submission_check.py). A row a stepped run did not give (its step failed) is wrong
in every variable: no binary one predicted 1, no categorical one right.
"""

from __future__ import annotations

import csv
from pathlib import Path

from vmjudge.config import DEFAULT_SCORE_OPTIONS, ScoreOptions
from vmjudge.errors import ScoringError
from vmjudge.queue.results import ExamResults

VERSION = 1  # bump whenever a rule below changes; scorer_version() records it
LABELS = "test_labels.csv"
CATEGORICAL = ("InjuryLocationType", "WeaponType1")


def score(results: ExamResults, reference: Path, options: ScoreOptions = DEFAULT_SCORE_OPTIONS) -> dict[str, float]:
    """{"binary_f1", "InjuryLocationType_f1", "WeaponType1_f1", "score"}."""
    if results.rows is None:
        raise ScoringError("The scorer youth_mental_health reads a submission's rows: set [entry] kind = "
                           "\"submission\" or choose another scorer.")
    labels, columns = read_labels(reference / LABELS)
    missing = [r for r in results.records if r not in labels]
    if missing:
        raise ScoringError(f"{reference / LABELS} has no row for the test id {missing[0]!r}: every id of the test "
                           "set's submission format needs its labels.")
    binary = sorted(set(columns) - set(CATEGORICAL))

    rows = results.rows

    def pairs(column: str) -> list[tuple[int, int | None]]:  # a missing row (a stepped run's failed step) guesses None
        return [(int(labels[r][column]), None if (row := rows.get(r)) is None else int(row[column]))
                for r in results.records]

    binary_f1 = sum(_f1_of_ones(pairs(c)) for c in binary) / len(binary)
    parts = {"binary_f1": binary_f1}
    for column in CATEGORICAL:
        got = pairs(column)
        parts[f"{column}_f1"] = sum(1 for truth, guess in got if truth == guess) / len(got)
    weights = [len(binary), 1, 1]
    total = binary_f1 * weights[0] + sum(parts[f"{c}_f1"] for c in CATEGORICAL)
    return {**parts, "score": total / sum(weights)}


def _f1_of_ones(pairs: list[tuple[int, int | None]]) -> float:
    tp = sum(1 for truth, guess in pairs if truth == 1 and guess == 1)
    fp = sum(1 for truth, guess in pairs if truth != 1 and guess == 1)
    fn = sum(1 for truth, guess in pairs if truth == 1 and guess != 1)
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def read_labels(path: Path) -> tuple[dict[str, dict[str, str]], list[str]]:
    """test_labels.csv's rows by uid, and its variables' columns (challenge add reads them too)."""
    try:
        with open(path, newline="") as f:
            table = list(csv.reader(f))
    except OSError as exc:
        raise ScoringError(f"{path} cannot be read ({exc.strerror or exc}): put the test set's labels there.") from None
    if not table or table[0][:1] != ["uid"] or not set(CATEGORICAL) <= set(table[0]):
        raise ScoringError(f"{path} needs DrivenData's header: uid, then the 23 variables (with "
                           f"{' and '.join(CATEGORICAL)}).")
    columns = table[0][1:]
    rows = {}
    for n, row in enumerate(table[1:], start=2):
        if len(row) != len(table[0]) or not all(v.strip().lstrip("-").isdigit() for v in row[1:]):
            raise ScoringError(f"{path} line {n} is not a uid and {len(columns)} whole numbers.")
        rows[row[0]] = dict(zip(columns, row[1:], strict=True))
    return rows, columns
