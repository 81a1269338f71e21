"""Built-in scorer "accuracy": the share of test records answered with exactly the reference
label. The default for a new challenge, whose labels need no special weighting."""

from __future__ import annotations

from pathlib import Path

from vmjudge.config import DEFAULT_SCORE_OPTIONS, ScoreOptions
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.answers import answers_of
from vmjudge.scorers.parts import ratio
from vmjudge.scorers.reference import read_reference_csv, reference_rows

VERSION = 1  # bump whenever a rule below changes; scorer_version() records it


def score(results: ExamResults, reference: Path, options: ScoreOptions = DEFAULT_SCORE_OPTIONS) -> dict[str, float]:
    """{"correct", "records", "score"}. An answer counts when, stripped of surrounding
    whitespace, it equals the label (case matters); a missing answer is wrong. No [score]
    option applies: any answer is accepted and no part can be 0/0."""
    answer = answers_of(results, "accuracy")
    rows = reference_rows(results, read_reference_csv(reference, (None,), "\"RECORD,LABEL\""), reference)
    correct = sum(1 for record, (label,) in rows if answer(record) == label)
    return {"correct": float(correct), "records": float(len(rows)), "score": ratio(correct, len(rows))}
