"""Built-in scorer "heart2016" (PhysioNet/CinC 2016, normal/abnormal heart sound recordings),
after the official score2016Challenge.m (revision of Aug 5 2016, Gari Clifford). Sensitivity
and specificity are each weighted over clean and noisy recordings, and an "unsure" answer
is rewarded on noisy recordings only.

Where it differs from the official script, on purpose: answers are looked up by the exact
record name (the script's strmatch also takes a longer name that starts with it); a clean or
noisy part with no recordings has weight 0 and is left out (the script gives NaN, 0·(0/0));
a class with no recordings at all gives a null Se or Sp ([score] undefined decides what it
does to score; the script gives NaN); an answer other than 1, -1 or 0, which stops the
script, is refused or mapped to 0 (unsure) as [score] invalid_answers says."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from vmjudge.config import DEFAULT_SCORE_OPTIONS, ScoreOptions
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.answers import answers_of, checked_answers
from vmjudge.scorers.parts import mean_of_parts
from vmjudge.scorers.reference import read_reference_csv, reference_rows

VERSION = 2  # bump whenever a rule below changes; scorer_version() records it
# 2: a class absent from the test set gives a null Se or Sp; unknown answers follow [score].

ANSWERS = ("1", "-1", "0")


def answer_problem(label: str) -> str | None:
    """Why the official script would refuse this answer (None: it accepts it)."""
    return None if label in ANSWERS else "not 1 (abnormal), -1 (normal) or 0 (unsure)"


def score(results: ExamResults, reference: Path,
          options: ScoreOptions = DEFAULT_SCORE_OPTIONS) -> dict[str, float | None]:
    """{"Se", "Sp", "score"} with score = (Se+Sp)/2.

    Reference lines are "RECORD,LABEL,QUALITY": LABEL 1 abnormal / -1 normal, QUALITY
    1 clean / 0 noisy. Answers are "1", "-1" or "0" (unsure); a missing answer counts as "0".
    With counts n[(label, quality, answer)]:
      Aa1, Aq1, An1 = abnormal clean answered 1, 0, -1;  Aa2, Aq2, An2 the noisy ones;
      Nn1, Nq1, Na1 = normal clean answered -1, 0, 1;    Nn2, Nq2, Na2 the noisy ones;
      wa1 = (Aa1+Aq1+An1)/(all abnormal), wa2 = 1−wa1; wn1, wn2 likewise for normals;
      Se = wa1·Aa1/(Aa1+Aq1+An1) + wa2·(Aa2+Aq2)/(Aa2+Aq2+An2)
      Sp = wn1·Nn1/(Na1+Nq1+Nn1) + wn2·(Nn2+Nq2)/(Na2+Nq2+Nn2)
    For what the script leaves undefined, see the module's docstring."""
    answers_of(results, "heart2016")  # results of the other style are refused before the reference is read
    table = read_reference_csv(reference, (("1", "-1"), ("1", "0")),
                               "\"RECORD,LABEL,QUALITY\" with LABEL 1 (abnormal) or -1 (normal) "
                               "and QUALITY 1 (clean) or 0 (noisy)")
    n: Counter[tuple[str, str, str]] = Counter()
    rows = reference_rows(results, table, reference)
    answer = checked_answers(results, "heart2016", options, answer_problem, "0")
    for record, (label, quality) in rows:
        n[label, quality, answer(record) or "0"] += 1
    se = _weighted(right=n["1", "1", "1"], unsure=n["1", "1", "0"], wrong=n["1", "1", "-1"],
                   noisy_right=n["1", "0", "1"], noisy_unsure=n["1", "0", "0"], noisy_wrong=n["1", "0", "-1"])
    sp = _weighted(right=n["-1", "1", "-1"], unsure=n["-1", "1", "0"], wrong=n["-1", "1", "1"],
                   noisy_right=n["-1", "0", "-1"], noisy_unsure=n["-1", "0", "0"], noisy_wrong=n["-1", "0", "1"])
    return {"Se": se, "Sp": sp, "score": float(mean_of_parts([se, sp], options))}


def _weighted(right: int, unsure: int, wrong: int, noisy_right: int, noisy_unsure: int,
              noisy_wrong: int) -> float | None:
    """One class's rate: clean records count only right answers, noisy ones also count
    "unsure"; the two parts are weighted by their share of the class (None: no records)."""
    clean = right + unsure + wrong
    noisy = noisy_right + noisy_unsure + noisy_wrong
    if clean + noisy == 0:
        return None
    w_clean = clean / (clean + noisy)
    value = 0.0
    if clean:
        value += w_clean * (right / clean)
    if noisy:
        value += (1 - w_clean) * ((noisy_right + noisy_unsure) / noisy)
    return value
