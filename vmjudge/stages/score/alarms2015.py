"""Built-in scorer "alarms2015" (PhysioNet/CinC 2015, reducing false arrhythmia alarms).
Suppressing a true alarm is five times as bad as keeping a false one, hence the 5·FN."""

from __future__ import annotations

from pathlib import Path

from vmjudge.stages.score import answers_of, ratio, read_reference_csv, reference_rows
from vmjudge.stages.score.base import ExamResults

VERSION = 1  # bump whenever a rule below changes; scorer_version() records it


def score(results: ExamResults, reference: Path) -> dict[str, float]:
    """{"TP", "TN", "FP", "FN", "score"} with score = (TP+TN)/(TP+TN+FP+5·FN).

    Reference lines are "RECORD,LABEL", LABEL 1 (true alarm) or 0 (false alarm). An answer
    other than "1" (missing, "0" or anything else) counts as 0, as the challenge did: an
    entry that says nothing has called the alarm false."""
    answer = answers_of(results, "alarms2015")
    table = read_reference_csv(reference, (("0", "1"),),
                               "\"RECORD,LABEL\" with LABEL 1 (true alarm) or 0 (false alarm)")
    tp = tn = fp = fn = 0
    for record, (label,) in reference_rows(results, table, reference):
        said_true = answer(record) == "1"
        if label == "1":
            tp, fn = (tp + 1, fn) if said_true else (tp, fn + 1)
        else:
            fp, tn = (fp + 1, tn) if said_true else (fp, tn + 1)
    return {"TP": float(tp), "TN": float(tn), "FP": float(fp), "FN": float(fn),
            "score": ratio(tp + tn, tp + tn + fp + 5 * fn)}
