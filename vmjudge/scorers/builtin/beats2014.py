"""Built-in scorer "beats2014" (PhysioNet/CinC 2014, robust heart beat detection in
multimodal data). Each record's answer is a WFDB annotation file of detected beats,
compared with the reference as `bxb -r REC -a atr qrs -f 0` of WFDB 10.7.0 did (bxb.py
states its rules), then summarised as `sumstats` did. The official program's output for
every case under tests/conformance/beats2014 is reproduced exactly.

Rules outside what the Challenge documented (its page says only: bxb with -f 0, and a
failed record's output replaced by one annotation matching nothing):
- a test file that is not a whole MIT-format annotation file (WFDB's reader would hit the
  end of the file before its end-of-file word, or it is in the AHA format), or that holds no
  beat annotation, is treated as a failed record, like a missing or empty one. Raw bxb would
  decode garbage into beats, and leave a file without beats out of the average +P;
- with no reference/RECORD.hea (a challenge keeps the record's header with the test set),
  the record's frequency is the one its reference annotation file declares, and, its length
  being unknown, the comparison runs until the reference annotations end, as bxb does for a
  record of unknown length.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from vmjudge.config import DEFAULT_SCORE_OPTIONS, ScoreOptions
from vmjudge.errors import ScoringError
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.builtin.bxb import Counts, compare, window
from vmjudge.scorers.builtin.wfdb_annotations import (
    QRS_CODES,
    Annotation,
    NotAnnotationFile,
    declared_resolution,
    read_annotations,
    read_header,
)
from vmjudge.scorers.parts import mean_of_parts

VERSION = 2  # bump whenever a rule below changes; scorer_version() records it
# 2: bxb's own rules (window in whole samples, times on the record's grid, "!", VF episodes,
#    the start-up placeholder, the record's end); a 0/0 summary value is null.

PARTS = ("Se_gross", "PPV_gross", "Se_average", "PPV_average")


def score(results: ExamResults, reference: Path,
          options: ScoreOptions = DEFAULT_SCORE_OPTIONS) -> dict[str, float | None]:
    """{"Se_gross", "PPV_gross", "Se_average", "PPV_average", "score"}, in [0, 1].

    As sumstats: Se = TP/(TP+FN), +P = TP/(TP+FP); gross values from the counts summed over
    records, averages the mean of the per-record values over the records whose denominator is
    not 0. A failed record (no file, an empty one, or one of the rules in the module's
    docstring) counts as bxb with one test annotation matching nothing: its reference beats
    missed, FP 1. score = mean of the four; a value that is 0/0 (sumstats prints "-": no
    reference beat at all, say) is null, and [score] undefined decides what it does to score."""
    if results.files is None:
        raise ScoringError("The scorer beats2014 expects style files (a WFDB annotation file per record), but "
                           "these results hold answer lines: set [results] style = \"files\" or choose another "
                           "scorer.")
    tallies = [compare_record(reference, record, results.files.get(record)) for record in results.records]
    values = summary(tallies)
    out: dict[str, float | None] = {k: None if v is None else float(v) for k, v in values.items()}
    out["score"] = float(mean_of_parts([values[k] for k in PARTS], options))  # exact mean, rounded once
    return out


def summary(tallies: list[Counts]) -> dict[str, Fraction | None]:
    """sumstats' four values as exact fractions (None for 0/0)."""
    tp, fn, fp = (sum(getattr(c, k) for c in tallies) for k in ("tp", "fn", "fp"))
    se = [Fraction(c.tp, c.tp + c.fn) for c in tallies if c.tp + c.fn]
    ppv = [Fraction(c.tp, c.tp + c.fp) for c in tallies if c.tp + c.fp]
    return {"Se_gross": Fraction(tp, tp + fn) if tp + fn else None,
            "PPV_gross": Fraction(tp, tp + fp) if tp + fp else None,
            "Se_average": sum(se, Fraction(0)) / len(se) if se else None,
            "PPV_average": sum(ppv, Fraction(0)) / len(ppv) if ppv else None}


def compare_record(reference: Path, record: str, answer: bytes | None) -> Counts:
    """bxb's tally of one record; `answer` is the bytes of the entry's annotation file."""
    path = reference / f"{record}.atr"
    try:
        ref_bytes = path.read_bytes()
    except OSError as exc:
        raise ScoringError(f"The reference annotation file {path} cannot be read ({exc.strerror or exc}): every "
                           "test record needs one.") from exc
    header = read_header(reference / f"{record}.hea")
    try:
        frequency = header.frequency if header is not None else declared_resolution(ref_bytes)
        if frequency is None:
            raise ScoringError(f"The sampling frequency of record {record!r} is unknown: put its header in "
                               f"{reference / (record + '.hea')} or declare the time resolution in {path}.")
        ref = read_annotations(ref_bytes, frequency)
    except NotAnnotationFile as exc:
        raise ScoringError(f"The reference annotation file {path} cannot be read ({exc}): write it again with "
                           "WFDB's wrann.") from exc
    end = header.samples if header is not None else 0
    match_window = window(frequency)
    test = _test_annotations(answer, frequency)
    if test is None:  # a failed record: one test annotation that matches nothing
        missed = compare(ref, [], match_window, end)
        return Counts(tp=0, fn=missed.fn, fp=1)
    return compare(ref, test, match_window, end)


def _test_annotations(answer: bytes | None, frequency: float) -> list[Annotation] | None:
    """The entry's annotations on the record's grid, or None for a failed record."""
    if not answer:
        return None
    try:
        annotations = read_annotations(answer, frequency)
    except NotAnnotationFile:
        return None
    return annotations if any(a.code in QRS_CODES for a in annotations) else None
