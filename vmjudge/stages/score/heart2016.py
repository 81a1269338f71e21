"""Built-in scorer "heart2016" (PhysioNet/CinC 2016, normal/abnormal heart sound recordings).
Sensitivity and specificity are each weighted over clean and noisy recordings, and an
"unsure" answer is rewarded on noisy recordings only, as the challenge's official score did."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from vmjudge.stages.score import answers_of, ratio, read_reference_csv, reference_rows
from vmjudge.stages.score.base import ExamResults

VERSION = 1  # bump whenever a rule below changes; scorer_version() records it


def score(results: ExamResults, reference: Path) -> dict[str, float]:
    """{"Se", "Sp", "score"} with score = (Se+Sp)/2.

    Reference lines are "RECORD,LABEL,QUALITY": LABEL 1 abnormal / -1 normal, QUALITY
    1 clean / 0 noisy. Answers are "1", "-1" or "0" (unsure); a missing or other answer
    counts as "0". With counts n[(label, quality, answer)]:
      Aa1, Aq1, An1 = abnormal clean answered 1, 0, -1;  Aa2, Aq2, An2 the noisy ones;
      Nn1, Nq1, Na1 = normal clean answered -1, 0, 1;    Nn2, Nq2, Na2 the noisy ones;
      wa1 = (Aa1+Aq1+An1)/(all abnormal), wa2 = 1−wa1; wn1, wn2 likewise for normals;
      Se = wa1·Aa1/(Aa1+Aq1+An1) + wa2·(Aa2+Aq2)/(Aa2+Aq2+An2)
      Sp = wn1·Nn1/(Na1+Nq1+Nn1) + wn2·(Nn2+Nq2)/(Na2+Nq2+Nn2)
    Any 0/0 (a class, or a class's clean or noisy part, absent from the test set) is 0,
    so its term adds nothing."""
    answer = answers_of(results, "heart2016")
    table = read_reference_csv(reference, (("1", "-1"), ("1", "0")),
                               "\"RECORD,LABEL,QUALITY\" with LABEL 1 (abnormal) or -1 (normal) "
                               "and QUALITY 1 (clean) or 0 (noisy)")
    n: Counter[tuple[str, str, str]] = Counter()
    for record, (label, quality) in reference_rows(results, table, reference):
        given = answer(record)
        n[label, quality, given if given in ("1", "-1", "0") else "0"] += 1
    se = _weighted(right=n["1", "1", "1"], unsure=n["1", "1", "0"], wrong=n["1", "1", "-1"],
                   noisy_right=n["1", "0", "1"], noisy_unsure=n["1", "0", "0"], noisy_wrong=n["1", "0", "-1"])
    sp = _weighted(right=n["-1", "1", "-1"], unsure=n["-1", "1", "0"], wrong=n["-1", "1", "1"],
                   noisy_right=n["-1", "0", "-1"], noisy_unsure=n["-1", "0", "0"], noisy_wrong=n["-1", "0", "1"])
    return {"Se": se, "Sp": sp, "score": (se + sp) / 2}


def _weighted(right: int, unsure: int, wrong: int, noisy_right: int, noisy_unsure: int, noisy_wrong: int) -> float:
    """One class's rate: clean records count only right answers, noisy ones also count
    "unsure"; the two parts are weighted by their share of the class."""
    clean = right + unsure + wrong
    noisy = noisy_right + noisy_unsure + noisy_wrong
    w_clean = ratio(clean, clean + noisy)
    return w_clean * ratio(right, clean) + (1 - w_clean) * ratio(noisy_right + noisy_unsure, noisy)
