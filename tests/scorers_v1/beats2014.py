# beats2014 as released at VERSION 1 (vmjudge commit 3354a3c, unchanged until 531df2e), kept verbatim
# below this header (but for lint-only edits that change nothing it does: zip's strict=False, a noqa)
# so that a test can score with it and rescore with VERSION 2.
"""Built-in scorer "beats2014" (PhysioNet/CinC 2014, robust heart beat detection in
multimodal data). Each record's answer is a WFDB annotation file of detected beats, compared
beat by beat with the reference as WFDB's `bxb -f 0` did, then summarised as sumstats did.

wfdb.processing.compare_annotations is not used: its window is strict (<), it raises on an
empty test annotation array, and it has no gross/average summary."""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import wfdb

from vmjudge.errors import ScoringError
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.parts import ratio

VERSION = 1  # bump whenever a rule below changes; scorer_version() records it

# Beat annotation codes (WFDB's N L R B A a J S V r F e j n E / f Q ?). Everything else
# (rhythm, noise, comments, and "!" flutter waves) is ignored in both files.
BEAT_SYMBOLS = frozenset("NLRBAaJSVrFejnE/fQ?")

# The match window, 150 ms inclusive, in seconds as an exact fraction.
WINDOW = Fraction(3, 20)


@dataclass(frozen=True)
class Counts:
    """One record's beat-by-beat tally."""

    tp: int  # reference beats matched by a test beat
    fn: int  # reference beats left unmatched
    fp: int  # test beats left unmatched


def score(results: ExamResults, reference: Path) -> dict[str, float]:
    """{"Se_gross", "PPV_gross", "Se_average", "PPV_average", "score"}, all in [0, 1].

    Se = TP/(TP+FN), +P = TP/(TP+FP). Gross values use the counts summed over records;
    averages are means of the per-record values, a record being skipped where a denominator
    is 0. A record with no test beats (file missing, empty, unreadable, or holding no beat
    annotation) is given one non-matching test annotation, so its Se = +P = 0 enter the
    averages and the gross counts get FP += 1. score = mean of the four values."""
    if results.files is None:
        raise ScoringError("The scorer beats2014 expects style files (a WFDB annotation file per record), but "
                           "these results hold answer lines: set [results] style = \"files\" or choose another "
                           "scorer.")
    tallies = [compare_record(reference, record, results.files.get(record)) for record in results.records]
    tp = sum(c.tp for c in tallies)
    fn = sum(c.fn for c in tallies)
    fp = sum(c.fp for c in tallies)
    se_values = [ratio(c.tp, c.tp + c.fn) for c in tallies if c.tp + c.fn]
    ppv_values = [ratio(c.tp, c.tp + c.fp) for c in tallies if c.tp + c.fp]
    out = {"Se_gross": ratio(tp, tp + fn), "PPV_gross": ratio(tp, tp + fp),
           "Se_average": ratio(sum(se_values), len(se_values)), "PPV_average": ratio(sum(ppv_values), len(ppv_values))}
    out["score"] = sum(out.values()) / 4
    return out


def compare_record(reference: Path, record: str, answer: bytes | None) -> Counts:
    """Beat-by-beat tally of one record; `answer` is the bytes of the entry's annotation file."""
    ref_samples, ref_fs = _reference_beats(reference, record)
    test = _test_beats(answer)
    if test is None or not test[0]:
        return Counts(tp=0, fn=len(ref_samples), fp=1)  # the one non-matching annotation
    test_samples, test_fs = test
    # Exact common time unit: a sample s at rate f is s/f seconds; multiplying every time by
    # 20·num(f_ref)·num(f_test) makes all times and the 3/20 s window integers.
    fr, ft = ref_fs, test_fs if test_fs is not None else ref_fs
    ref_times = [s * fr.denominator * ft.numerator * 20 for s in ref_samples]
    test_times = [s * ft.denominator * fr.numerator * 20 for s in test_samples]
    window = 3 * fr.numerator * ft.numerator
    return match(ref_times, test_times, window)


def match(ref: list[int], test: list[int], window: int) -> Counts:
    """bxb's pairing rule (cases 1–4 of its main loop), with an inclusive window.

    Walk both sorted lists; look at the earlier of the current reference beat T and test
    beat t (t first when t < T). The earlier one is paired with the other when they are at
    most `window` apart and the other is nearer to it than to its own successor (T′ or t′),
    or the successors T′ and t′ are nearer to each other than the other is to its
    successor (so a pair is not broken up when beats come closer than twice the window);
    otherwise the earlier one is unmatched (FP for a test beat, FN for a reference beat).
    For beats more than two windows apart this is simply: each reference beat is matched
    to the nearest test beat within the window. All test beats count (bxb with a record
    length given), including any after the last reference beat."""
    ref, test = sorted(ref), sorted(test)
    end = max(ref[-1] if ref else 0, test[-1] if test else 0) + 4 * window + 1  # bxb's "huge_time"
    ref.append(end)
    ref.append(end)
    test.append(end)
    test.append(end)
    i = j = tp = fn = fp = 0
    while ref[i] != end or test[j] != end:
        big_t, big_t2, t, t2 = ref[i], ref[i + 1], test[j], test[j + 1]
        if t < big_t:
            if big_t - t <= window and (big_t - t < abs(big_t - t2) or abs(big_t2 - t2) < abs(big_t - t2)):
                tp, i, j = tp + 1, i + 1, j + 1
            else:
                fp, j = fp + 1, j + 1
        else:
            if t - big_t <= window and (t - big_t < abs(t - big_t2) or abs(t2 - big_t2) < abs(t - big_t2)):
                tp, i, j = tp + 1, i + 1, j + 1
            else:
                fn, i = fn + 1, i + 1
    return Counts(tp=tp, fn=fn, fp=fp)


def _reference_beats(reference: Path, record: str) -> tuple[list[int], Fraction]:
    """Reference beat samples and the rate they are counted in: the annotation file's own
    time resolution, else the record header reference/RECORD.hea (rdann reads it)."""
    path = reference / f"{record}.atr"
    if not path.is_file():
        raise ScoringError(f"The reference annotation file {path} does not exist: every test record needs one.")
    try:
        ann = wfdb.rdann(str(reference / record), "atr")
    except Exception as exc:  # wfdb raises many kinds on a damaged file
        raise ScoringError(f"The reference annotation file {path} cannot be read ({type(exc).__name__}: "
                           f"{exc}).") from exc
    fs = _rate(ann.fs)
    if fs is None:
        raise ScoringError(f"The sampling frequency of record {record!r} is unknown: neither {path} nor "
                           f"{reference / (record + '.hea')} gives it.")
    return _beats(ann), fs


def _test_beats(answer: bytes | None) -> tuple[list[int], Fraction | None] | None:
    """The entry's beat samples and the rate the file declares (None: the record's rate),
    or None when there is no file or it cannot be parsed."""
    if not answer:
        return None
    with tempfile.TemporaryDirectory(prefix="vmjudge-beats-") as tmp:
        (Path(tmp) / "answer.qrs").write_bytes(answer)
        try:
            ann = wfdb.rdann(str(Path(tmp) / "answer"), "qrs")
        except Exception:  # noqa: BLE001 - any parse failure means "no beats", never a crashed scoring
            return None
    fs = _rate(ann.fs)
    if ann.fs is not None and fs is None:
        return None  # a declared time resolution that is no rate: the file is damaged
    return _beats(ann), fs


def _beats(ann: wfdb.Annotation) -> list[int]:
    return [int(s) for s, sym in zip(ann.sample.tolist(), ann.symbol or [], strict=False) if sym in BEAT_SYMBOLS]


def _rate(fs: object) -> Fraction | None:
    try:
        value = float(fs)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return Fraction(value) if math.isfinite(value) and value > 0 else None
