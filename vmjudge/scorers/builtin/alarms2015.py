"""Built-in scorer "alarms2015" (PhysioNet/CinC 2015, reducing false arrhythmia alarms),
after the official score2015Challenge.m (Ikaro Silva, Jan 26 2015). Suppressing a true alarm
is five times as bad as keeping a false one, hence the 5·FN.

Where it differs from the official script, on purpose: answers are looked up by the exact
record name (the script's strmatch also takes a longer name that starts with it, r10 for r1),
and a non-numeric answer, which stops the script, is refused or mapped as [score]
invalid_answers says."""

from __future__ import annotations

import re
from pathlib import Path

from vmjudge.config import DEFAULT_SCORE_OPTIONS, ScoreOptions
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.answers import answers_of, checked_answers
from vmjudge.scorers.parts import ratio
from vmjudge.scorers.reference import read_reference_csv, reference_rows

VERSION = 2  # bump whenever a rule below changes; scorer_version() records it
# 2: any nonzero number is a true alarm, as the official script's `this_answer ~= 0`.

# A decimal number, as the script's textscan reads one ("1", "-1", "2", "0.5", "1e3").
_NUMBER_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def answer_problem(label: str) -> str | None:
    """Why the official script would refuse this answer (None: it reads it as a number)."""
    if label == "" or _NUMBER_RE.match(label):
        return None
    return "not a number: use 1 for a true alarm, 0 for a false one"


def score(results: ExamResults, reference: Path,
          options: ScoreOptions = DEFAULT_SCORE_OPTIONS) -> dict[str, float | None]:
    """{"TP", "TN", "FP", "FN", "score"} with score = (TP+TN)/(TP+TN+FP+5·FN).

    Reference lines are "RECORD,LABEL", LABEL 1 (true alarm) or 0 (false alarm). As the
    official script: an answer that is a nonzero number calls the alarm true ("1", but also
    "2" or "-1"); "0", an empty answer or no line for the record calls it false: an entry
    that says nothing has suppressed the alarm. A non-numeric answer: see the module's
    docstring ("map" reads it as 0)."""
    answers_of(results, "alarms2015")  # results of the other style are refused before the reference is read
    table = read_reference_csv(reference, (("0", "1"),),
                               "\"RECORD,LABEL\" with LABEL 1 (true alarm) or 0 (false alarm)")
    tp = tn = fp = fn = 0
    rows = reference_rows(results, table, reference)
    answer = checked_answers(results, "alarms2015", options, answer_problem, "0")
    for record, (label,) in rows:
        given = answer(record)
        said_true = bool(given) and float(given) != 0  # type: ignore[arg-type]
        if label == "1":
            tp, fn = (tp + 1, fn) if said_true else (tp, fn + 1)
        else:
            fp, tn = (fp + 1, tn) if said_true else (fp, tn + 1)
    return {"TP": float(tp), "TN": float(tn), "FP": float(fp), "FN": float(fn),
            "score": ratio(tp + tn, tp + tn + fp + 5 * fn)}
