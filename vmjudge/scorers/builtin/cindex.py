"""Built-in scorer "cindex": Harrell's concordance index of predicted risks against censored times, as
HECKTOR 2025 Task 2 (recurrence-free survival, RFS) ranks its entries.

Each test record's answer is a JSON file holding one number: with sockets the file the case left for
the [score] socket (HECKTOR's template writes /output/rfs.json, e.g. `-0.396`), else its output
file. The reference is reference/survival.csv, a header `record,time,event` then one line per
record: the time in days (a number >= 0) and event 1 (recurrence observed) or 0 (censored then).

Direction: the number is a RISK, higher meaning recurrence sooner. HECKTOR 2025's submission
instructions (hecktor25.grand-challenge.org/submission-instructions, Task 2) ask for an output
"anti-concordant with the RFS in days (i.e., the model should output a predicted risk score)", and
the organisers' own baseline writes its model's risk to rfs.json unchanged (docker-template branch of
github.com/BioMedIA-MBZUAI/HECKTOR2025, Task_2/inference.py) and evaluates it with lifelines as
`concordance_index(times, -predictions, events)` (main branch, Task2/task2_inference.py, "higher
risk = lower survival"). So this scorer equals lifelines' concordance_index(time, -prediction, event).
An entry predicting RFS days must write their negative.

Pairs, as lifelines and HECKTOR 2021's evaluator (github.com/voreille/hecktor,
src/aicrowd_evaluator/survival_metrics.py) count them: records i and j are comparable when i has an
event and t_i < t_j, or t_i == t_j and only i has an event (j, censored then, outlived i); two
events at the same time are not. A comparable pair is concordant when risk_i > risk_j, counts 0.5
when the two risks are equal (Harrell), 0 otherwise. score = (concordant + ties / 2) / pairs.

A failed record (no file, a file over 1 MiB, or one that is not a single finite JSON number, `true`
included) counts 0.5 in each comparable pair it is in, as HECKTOR 2021's official evaluator counts a
missing prediction ("same as random"): failing neither wins a pair nor depends on the entry's other
predictions (as imputing their median would), and it gains only over a prediction worse than chance
on that record's pairs. No comparable pair at all (e.g. no event in the test
set): `cindex` is null, 0/0, and score 0 whatever [score] undefined says. Also reported:
`comparable_pairs`, `records`, `failed`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from vmjudge.config import DEFAULT_SCORE_OPTIONS, ScoreOptions
from vmjudge.errors import ScoringError
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.answers import files_of
from vmjudge.scorers.parts import mean_of_parts, part

VERSION = 1  # bump whenever a rule below changes; scorer_version() records it

REFERENCE_FILE = "survival.csv"
HEADER = ("record", "time", "event")
MAX_BYTES = 1 << 20  # as a value socket's JSON by default (config/sockets.py); a risk needs a few bytes
# Plain decimal notation: float() alone would also take "nan", "inf", "1_000" and non-ASCII digits.
_TIME_RE = re.compile(r"^(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$", re.ASCII)


def read_survival(reference: Path) -> dict[str, tuple[float, bool]]:
    """reference/survival.csv as {record: (time, event)}, every line checked: a malformed
    reference must stop the scoring with the line named, never give a silently wrong score."""
    path = reference / REFERENCE_FILE
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte order mark is no part of the header
    except (OSError, UnicodeDecodeError) as exc:
        raise ScoringError(f"The reference file {path} cannot be read ({getattr(exc, 'strerror', None) or exc}): "
                           "the scorer cindex needs it, with a line \"record,time,event\" for each test "
                           "record.") from exc
    table: dict[str, tuple[float, bool]] = {}
    header = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        fields = tuple(f.strip() for f in line.split(","))
        if not header:
            if fields != HEADER:
                raise ScoringError(f"{path} line {number} is {line!r}, but its first line must be the header "
                                   "\"record,time,event\".")
            header = True
            continue
        if (len(fields) != 3 or not fields[0] or not _TIME_RE.match(fields[1]) or fields[2] not in ("0", "1")
                or not math.isfinite(float(fields[1]))):
            raise ScoringError(f"{path} line {number} is {line!r}, but each line must be RECORD,TIME,EVENT with "
                               "TIME a number of days >= 0 and EVENT 1 (recurrence) or 0 (censored).")
        if fields[0] in table:
            raise ScoringError(f"{path} line {number} repeats record {fields[0]!r}: give each record one line.")
        table[fields[0]] = (float(fields[1]), fields[2] == "1")
    if not header:
        raise ScoringError(f"{path} is empty: it needs the header \"record,time,event\" and a line per test record.")
    return table


def prediction(data: bytes | None) -> float | None:
    """The risk a record's JSON holds; None (a failed record) unless it is one finite number.
    Bounded before parsing: an entry's file must cost the host no more than a small value."""
    if data is None or len(data) > MAX_BYTES:
        return None
    try:
        value = json.loads(data)
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except (ValueError, RecursionError, OverflowError):  # not JSON, too deep, an integer too long for a float
        return None
    return number if math.isfinite(number) else None


def answer_files(results: ExamResults, options: ScoreOptions) -> Mapping[str, bytes | None]:
    """Each record's JSON bytes (scorers/answers.py files_of)."""
    return files_of(results, "cindex", options, "the risk")


def concordance(times: np.ndarray, events: np.ndarray, risks: np.ndarray) -> tuple[int, int, int]:
    """(concordant, tied, comparable) pairs; a NaN risk (a failed record) ties every pair it is in.
    One vectorised pass per event, so a test set of thousands stays quick without n² memory."""
    correct = tied = pairs = 0
    for i in np.flatnonzero(events):
        later = (times > times[i]) | ((times == times[i]) & ~events)
        others = risks[later]
        n = int(later.sum())
        pairs += n
        if math.isnan(risks[i]):
            tied += n
            continue
        correct += int((others < risks[i]).sum())  # NaN compares false: neither correct nor tied below
        tied += int((others == risks[i]).sum() + np.isnan(others).sum())
    return correct, tied, pairs


def score(results: ExamResults, reference: Path,
          options: ScoreOptions = DEFAULT_SCORE_OPTIONS) -> dict[str, float | None]:
    """{"score", "cindex" (null when no pair is comparable), "comparable_pairs", "records", "failed"}."""
    files = answer_files(results, options)
    table = read_survival(reference)
    missing = [r for r in results.records if r not in table]
    if missing:
        raise ScoringError(f"{reference / REFERENCE_FILE} has no line for test record {missing[0]!r}"
                           + (f" (nor for {len(missing) - 1} more)" if len(missing) > 1 else "")
                           + ": every record of the test set needs its time and event.")
    predicted = [prediction(files.get(r)) for r in results.records]
    times = np.array([table[r][0] for r in results.records], dtype=float)
    events = np.array([table[r][1] for r in results.records], dtype=bool)
    risks = np.array([math.nan if p is None else p for p in predicted], dtype=float)
    correct, tied, pairs = concordance(times, events, risks)
    cindex = part(2 * correct + tied, 2 * pairs)
    return {"score": float(mean_of_parts([cindex], options)), "cindex": cindex, "comparable_pairs": float(pairs),
            "records": float(len(predicted)), "failed": float(sum(p is None for p in predicted))}
