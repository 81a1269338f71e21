"""The cindex scorer (HECKTOR 2025 Task 2) against lifelines' concordance_index, the published
implementation HECKTOR's organisers evaluate with: random test sets over many seeds, with tied
times, tied predictions and censoring, the entry's JSON going through the archive's encode and
decode as stage 4 reads it. Then the failed-record rule, the bounds on what is read, and the
reference's refusals."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
from lifelines.utils import concordance_index

from vmjudge.config import ScoreOptions
from vmjudge.errors import ScoringError
from vmjudge.queue.results import ExamResults, decode, encode
from vmjudge.scorers.builtin import cindex
from vmjudge.scorers.loader import load_scorer, scorer_version

SOCKET = ScoreOptions(socket="rfs")
BIG = 1e12  # far beyond any risk drawn below: a failed record's two extreme stand-ins


def write_reference(tmp_path: Path, rows: list[tuple[str, float, int]], header: str = "record,time,event") -> Path:
    ref = tmp_path / "reference"
    ref.mkdir(exist_ok=True)
    (ref / "survival.csv").write_text("\n".join([header, *(f"{r},{t:g},{e}" for r, t, e in rows)]) + "\n",
                                      encoding="utf-8")
    return ref


def archived(outputs: dict[str, bytes | None], records: tuple[str, ...]) -> ExamResults:
    """Socket results as the exam archives them ("RECORD/rfs") and stage 4 reads them back; a
    record whose value is None left nothing (no key at all)."""
    files = {f"{r}/rfs": data for r, data in outputs.items() if data is not None}
    statuses = {r: ("ok" if outputs.get(r) is not None else "error") for r in records}
    return decode(encode(records, statuses, "sockets", files=files))


def random_case(rng: random.Random) -> tuple[list[float], list[int], list[float]]:
    """Times from a small range (many ties), about a third censored, risks rounded to one decimal
    (ties in prediction)."""
    n = rng.randint(2, 40)
    times = [float(rng.randint(1, 15) * 30) for _ in range(n)]
    events = [int(rng.random() > 0.35) for _ in range(n)]
    risks = [round(rng.gauss(0, 1), 1) for _ in range(n)]
    return times, events, risks


def lifelines_cindex(times, events, risks) -> float | None:
    """HECKTOR 2025's evaluation: the risk negated, as its baseline does (higher risk, shorter RFS)."""
    try:
        return concordance_index(times, [-r for r in risks], events)
    except ZeroDivisionError:  # no admissible pair
        return None


@pytest.mark.parametrize("seed", range(300))
def test_cindex_is_lifelines_concordance_index_of_the_negated_risk(tmp_path, seed):
    rng = random.Random(seed)
    times, events, risks = random_case(rng)
    records = tuple(f"CHUM-{i:03d}" for i in range(len(times)))
    ref = write_reference(tmp_path, list(zip(records, times, events, strict=True)))
    results = archived({r: json.dumps(x, indent=4).encode() for r, x in zip(records, risks, strict=True)}, records)
    got = cindex.score(results, ref, SOCKET)
    expected = lifelines_cindex(times, events, risks)
    assert got["records"] == len(records) and got["failed"] == 0
    if expected is None:
        assert (got["cindex"], got["score"], got["comparable_pairs"]) == (None, 0.0, 0.0)
    else:
        assert got["cindex"] == pytest.approx(expected, rel=1e-12) and got["score"] == got["cindex"]


@pytest.mark.parametrize("seed", range(100))
def test_a_failed_record_ties_each_of_its_pairs(tmp_path, seed):
    """Counting 0.5 for each comparable pair a failed record is in equals the mean of lifelines'
    index over every way of giving the failed records an extreme risk, +BIG or -BIG: over those
    ways each such pair is won exactly as often as lost (or tied), and the pairs counted do not
    change. An independent check of the rule, without a second implementation of it."""
    rng = random.Random(1000 + seed)
    times, events, risks = random_case(rng)
    failed = rng.sample(range(len(times)), rng.randint(1, min(3, len(times))))
    records = tuple(f"r{i}" for i in range(len(times)))
    ref = write_reference(tmp_path, list(zip(records, times, events, strict=True)))
    broken = [None, b"true", b"NaN", b"[0.3]", b'{"rfs": 0.3}', b'"0.3"', b"\xff\xfe", b"1e400", b""]
    outputs = {r: (rng.choice(broken) if i in failed else json.dumps(risks[i]).encode())
               for i, r in enumerate(records)}
    got = cindex.score(archived(outputs, records), ref, SOCKET)
    assert got["failed"] == len(failed)
    ways = []
    for signs in itertools.product((BIG, -BIG), repeat=len(failed)):
        stand_in = list(risks)
        for i, sign in zip(failed, signs, strict=True):
            stand_in[i] = sign
        ways.append(lifelines_cindex(times, events, stand_in))
    if ways[0] is None:
        assert got["cindex"] is None
    else:
        assert got["cindex"] == pytest.approx(sum(ways) / len(ways), rel=1e-12)


def test_direction_higher_risk_recurs_sooner(tmp_path):
    ref = write_reference(tmp_path, [("a", 100, 1), ("b", 200, 1), ("c", 300, 0)])
    right = {"a": b"-0.1", "b": b"-0.39611914675643234", "c": b"-2"}  # the form of HECKTOR's template rfs.json
    wrong = {"a": b"1", "b": b"2", "c": b"3"}  # RFS days, not negated: every pair discordant
    assert cindex.score(archived(right, ("a", "b", "c")), ref, SOCKET)["score"] == 1.0
    assert cindex.score(archived(wrong, ("a", "b", "c")), ref, SOCKET)["score"] == 0.0


def test_a_worked_example_of_the_pairs(tmp_path):
    """a (event at 100) precedes all; b and c have events at the same time (not comparable with each
    other); d is censored at 200, the time of b's and c's events (comparable with both: it outlived
    them); e is censored at 50 (before any event: comparable with none). 5 pairs: a-b, a-c, a-d,
    b-d, c-d. a and b tie, c fails."""
    ref = write_reference(tmp_path, [("a", 100, 1), ("b", 200, 1), ("c", 200, 1), ("d", 200, 0), ("e", 50, 0)])
    answers = {"a": b"5", "b": b"5.0", "c": b"true", "d": b"1", "e": b"9"}
    got = cindex.score(archived(answers, tuple(answers)), ref, SOCKET)
    # a-b tie .5, a-c failed .5, a-d 1, b-d 1, c-d failed .5
    assert got == {"score": 3.5 / 5, "cindex": 3.5 / 5, "comparable_pairs": 5.0, "records": 5.0, "failed": 1.0}


@pytest.mark.parametrize("data", [b"-0.396", b"  3\n", b"7", b"1e-3", b"-0", "\ufeff0.5".encode()])
def test_a_json_number_is_a_prediction(data):
    assert cindex.prediction(data) == float(data.decode("utf-8-sig"))


@pytest.mark.parametrize("data", [
    None, b"", b"true", b"false", b"null", b'"0.5"', b"[0.5]", b'{"rfs": 0.5}', b"NaN", b"Infinity", b"-Infinity",
    b"1e400", b"9" * 5000, b"[" * 200_000, b"0.5 0.6", b"\x00\x01", b"0x10",
    b" " * (1 << 20) + b"1",  # valid JSON, but over 1 MiB: refused before it is parsed
])
def test_anything_else_is_a_failed_record(data):
    assert cindex.prediction(data) is None


def test_no_comparable_pair_is_undefined_and_scores_zero(tmp_path):
    ref = write_reference(tmp_path, [("a", 100, 0), ("b", 200, 0)])
    for options in (SOCKET, ScoreOptions(socket="rfs", undefined="zero")):
        got = cindex.score(archived({"a": b"1", "b": b"2"}, ("a", "b")), ref, options)
        assert got == {"score": 0.0, "cindex": None, "comparable_pairs": 0.0, "records": 2.0, "failed": 0.0}


def test_records_only_in_the_reference_are_ignored_and_files_style_is_read(tmp_path):
    ref = write_reference(tmp_path, [("a", 100, 1), ("b", 200, 0), ("other-set", 1, 1)])
    got = cindex.score(ExamResults(records=("a", "b"), files={"a": b"2", "b": b"1"}), ref)
    assert (got["score"], got["comparable_pairs"]) == (1.0, 1.0)


def test_the_loader_finds_it_with_the_challenges_socket(tmp_path):
    ref = write_reference(tmp_path, [("a", 100, 1), ("b", 200, 0)])
    results = archived({"a": b"2", "b": b"1"}, ("a", "b"))
    assert load_scorer("cindex", SOCKET)(results, ref)["score"] == 1.0
    assert scorer_version("cindex", SOCKET) == "cindex/1"


def test_results_it_cannot_read_are_refused(tmp_path):
    ref = write_reference(tmp_path, [("a", 100, 1)])
    with pytest.raises(ScoringError, match=r"set \[score\] socket"):
        cindex.score(archived({"a": b"1"}, ("a",)), ref)
    with pytest.raises(ScoringError, match="answer lines"):
        cindex.score(ExamResults(records=("a",), answers={"a": "1"}), ref, SOCKET)


@pytest.mark.parametrize("text, words", [
    (None, "cannot be read"),
    ("", "is empty"),
    ("\n\n", "is empty"),
    ("a,100,1\n", "line 1 is 'a,100,1', but its first line must be the header"),
    ("record,time,event,extra\na,1,1\n", "first line must be the header"),
    ("record,time,event\na,100\n", "line 2 is 'a,100'"),
    ("record,time,event\na,100,1,x\n", "line 2"),
    ("record,time,event\n,100,1\n", "line 2"),
    ("record,time,event\na,,1\n", "line 2"),
    ("record,time,event\na,-1,1\n", "TIME a number of days >= 0"),
    ("record,time,event\na,nan,1\n", "line 2"),
    ("record,time,event\na,inf,1\n", "line 2"),
    ("record,time,event\na,1e999,1\n", "line 2"),
    ("record,time,event\na,1_000,1\n", "line 2"),
    ("record,time,event\na,١٠٠,1\n", "line 2"),
    ("record,time,event\na,100,2\n", "EVENT 1 (recurrence) or 0 (censored)"),
    ("record,time,event\na,100,yes\n", "line 2"),
    ("record,time,event\na,100,1.0\n", "line 2"),
    ("record,time,event\na,100,1\n\na,200,0\n", "line 4 repeats record 'a'"),
    ("record,time,event\nb,100,1\n", "no line for test record 'a'"),
])
def test_a_malformed_reference_is_refused_in_one_sentence(tmp_path, text, words):
    ref = tmp_path / "reference"
    ref.mkdir()
    if text is not None:
        (ref / "survival.csv").write_text(text, encoding="utf-8")
    with pytest.raises(ScoringError) as err:
        cindex.score(ExamResults(records=("a",), files={"a": b"1"}), ref)
    message = str(err.value)
    assert words in message and str(ref / "survival.csv") in message
    assert message.endswith(".") and message.count(": ") <= 1 and "\n" not in message


def test_a_byte_order_mark_and_crlf_line_ends_are_read(tmp_path):
    ref = tmp_path / "reference"
    ref.mkdir()
    (ref / "survival.csv").write_bytes(b"\xef\xbb\xbfrecord,time,event\r\na,100.5,1\r\nb,.5e3,0\r\n")
    got = cindex.score(ExamResults(records=("a", "b"), files={"a": b"1", "b": b"0"}), ref)
    assert (got["score"], got["comparable_pairs"]) == (1.0, 1.0)
