"""The built-in scorers against the official programs' real output (tests/conformance/: its
README says how each expected.json was made). Every case must
agree with the official result, or be one of the documented out-of-domain cases, for which
the documented rule is checked instead. Host-only: no VM, no WFDB tool, no Octave."""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest

from vmjudge.config import ScoreOptions
from vmjudge.errors import AnswerError
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.builtin import af2017, alarms2015, beats2014, heart2016
from vmjudge.stages.answers import parse_answer_lines

ROOT = Path(__file__).parent / "conformance"
INDEX = json.loads((ROOT / "index.json").read_text())["years"]
MAPPED = ScoreOptions(invalid_answers="map")
ZERO = ScoreOptions(undefined="zero")


def cases(year: str) -> list[str]:
    return [c["case"] for c in INDEX[year]]


def expected(year: str, case: str) -> dict:
    return json.loads((ROOT / year / case / "expected.json").read_text())


def test_every_fixture_case_is_listed_and_present():
    for year in INDEX:
        assert sorted(cases(year)) == sorted(p.name for p in (ROOT / year).iterdir() if p.is_dir())
    assert {y: len(cases(y)) for y in INDEX} == {"beats2014": 93, "alarms2015": 66, "heart2016": 66, "af2017": 65}


# --- beats2014: bxb + sumstats ------------------------------------------------------------

def beats_case(case: str) -> tuple[dict, ExamResults]:
    exp = expected("beats2014", case)
    records = tuple(r["record"] for r in exp["records"])
    files = {r["record"]: (ROOT / "beats2014" / case / r["test_file"]).read_bytes() if r["test_file"] else None
             for r in exp["records"]}
    return exp, ExamResults(records=records, files=files)


@pytest.mark.parametrize("case", cases("beats2014"))
def test_beats2014_agrees_with_bxb_and_sumstats(case):
    exp, results = beats_case(case)
    # Undocumented inputs (a file with no beats, garbage): vmjudge's rule is the failed-record
    # rule, whose official output is the "failed_record_rule" block.
    block = exp["official"] if exp["official"] is not None else exp["failed_record_rule"]
    assert (exp["official"] is None) == (exp["undocumented"] is not None)
    directory = ROOT / "beats2014" / case
    tallies = {r: beats2014.compare_record(directory, r, results.files[r]) for r in results.records}
    assert {r: {"TP": c.tp, "FN": c.fn, "FP": c.fp} for r, c in tallies.items()} == \
        {r: {k: v[k] for k in ("TP", "FN", "FP")} for r, v in block["per_record"].items()}
    fractions = beats2014.summary(list(tallies.values()))
    for name, value in fractions.items():
        official = block["summary"][name]
        if official["sumstats"] == "-":
            assert value is None
        else:
            assert value == Fraction(official["fraction"])
    got = beats2014.score(results, directory)
    assert all(v is None or type(v) is float for v in got.values())  # what a scoring record stores
    if block["summary"]["score"]["fraction"] is not None:
        assert got["score"] == pytest.approx(float(Fraction(block["summary"]["score"]["fraction"])), abs=1e-12)
    else:  # a summary value is 0/0: omit (the default) averages the others
        defined = [float(v) for v in fractions.values() if v is not None]
        assert got["score"] == pytest.approx(sum(defined) / len(defined) if defined else 0.0, abs=1e-12)


def test_beats2014_undocumented_cases_are_the_three_no_beat_files():
    undocumented = [c["case"] for c in INDEX["beats2014"] if c["status"] == "undocumented"]
    assert sorted(undocumented) == ["hand-eof-only-annotation-file", "hand-garbage-bytes",
                                    "hand-only-non-beat-annotations"]


# --- alarms2015 ---------------------------------------------------------------------------

PREFIX_NAMES = {  # exact-name lookup, where the official strmatch also takes r10 for r1
    ("alarms2015", "hand-05-prefix-record-names"): {"TP": 1.0, "TN": 1.0, "FP": 0.0, "FN": 0.0, "score": 1.0},
    ("heart2016", "hand-05-prefix-record-names"): {"Se": 1.0, "Sp": 1.0, "score": 1.0},
    ("af2017", "hand-04-prefix-record-names"): {"F1_N": 1.0, "F1_A": 1.0, "F1_O": 1.0, "F1_noise": 1.0,
                                                "score": 1.0, "score_4class": 1.0},
}
SCORERS = {"alarms2015": alarms2015, "heart2016": heart2016, "af2017": af2017}


def answers_case(year: str, case: str) -> tuple[dict, ExamResults, Path]:
    directory = ROOT / year / case
    records = tuple(line.split(",")[0].strip() for line in (directory / "REFERENCE.csv").read_text().splitlines()
                    if line.strip())
    given = parse_answer_lines((directory / "answers.txt").read_bytes())
    return expected(year, case), ExamResults(records=records, answers={r: given.get(r) for r in records}), directory


def assert_parts(got: dict, official: dict, names: tuple[str, ...]) -> None:
    for name in names:
        assert got[name] == pytest.approx(official[name], abs=1e-9), name


@pytest.mark.parametrize("case", cases("alarms2015"))
def test_alarms2015_agrees_with_score2015challenge(case):
    exp, results, directory = answers_case("alarms2015", case)
    if ("alarms2015", case) in PREFIX_NAMES:
        assert alarms2015.score(results, directory) == PREFIX_NAMES["alarms2015", case]
    elif exp["official"] == "error":  # a non-numeric answer stops the script
        with pytest.raises(AnswerError) as info:
            alarms2015.score(results, directory)
        assert re.search("not a number", info.value.detail), info.value.detail
        mapped = alarms2015.score(results, directory, MAPPED)
        as_zero = {r: ("0" if a is not None and alarms2015.answer_problem(a.strip()) else a)
                   for r, a in results.answers.items()}
        assert mapped == alarms2015.score(ExamResults(results.records, answers=as_zero), directory)
    else:
        got = alarms2015.score(results, directory)
        counts = ("TP", "FP", "FN", "TN")
        assert {k: got[k] for k in counts} == {k: exp["official"][k] for k in counts}
        assert got["score"] == pytest.approx(float(Fraction(exp["score_fraction"])), abs=1e-12)


# --- heart2016 and af2017 -----------------------------------------------------------------

def heart_rule(exp: dict) -> dict:
    """The documented rule where the script says NaN, from the script's own counts: a part
    with no recordings is left out, a class with none is null, score the mean of the rest."""
    c = exp["counts"]

    def rate(right, unsure, wrong, n_right, n_unsure, n_wrong):
        clean, noisy = right + unsure + wrong, n_right + n_unsure + n_wrong
        if clean + noisy == 0:
            return None
        w = clean / (clean + noisy)
        return (w * right / clean if clean else 0.0) + ((1 - w) * (n_right + n_unsure) / noisy if noisy else 0.0)

    se = rate(c["Aa1"], c["Aq1"], c["An1"], c["Aa2"], c["Aq2"], c["An2"])
    sp = rate(c["Nn1"], c["Nq1"], c["Na1"], c["Nn2"], c["Nq2"], c["Na2"])
    defined = [v for v in (se, sp) if v is not None]
    return {"Se": se, "Sp": sp, "score": sum(defined) / len(defined)}


def assert_refused_then_mapped(scorer, results: ExamResults, directory, why: str, stand_in: str) -> None:
    """Refused by default, as the official script stops; with invalid_answers = "map", scored
    as if each refused answer were the scorer's stand-in."""
    with pytest.raises(AnswerError) as info:
        scorer.score(results, directory)
    assert re.search(why, info.value.detail), info.value.detail
    mapped = {r: (stand_in if a and scorer.answer_problem(a.strip()) else a) for r, a in results.answers.items()}
    assert scorer.score(results, directory, MAPPED) == \
        scorer.score(ExamResults(results.records, answers=mapped), directory)


@pytest.mark.parametrize("case", cases("heart2016"))
def test_heart2016_agrees_with_score2016challenge(case):
    exp, results, directory = answers_case("heart2016", case)
    if ("heart2016", case) in PREFIX_NAMES:
        assert heart2016.score(results, directory) == PREFIX_NAMES["heart2016", case]
        return
    if exp["official"] == "error":  # a token other than 1, -1, 0 stops the script
        assert_refused_then_mapped(heart2016, results, directory, "not 1 \\(abnormal\\), -1 \\(normal\\) or 0", "0")
        return
    got = heart2016.score(results, directory)
    if exp["official"] == "NaN":
        rule = heart_rule(exp)
        for name in ("Se", "Sp"):
            if exp["official_values"][name] != "NaN":  # every number the script gives is kept
                assert got[name] == pytest.approx(exp["official_values"][name], abs=1e-9)
            if rule[name] is None:
                assert got[name] is None
            else:
                assert got[name] == pytest.approx(rule[name], abs=1e-12)
        assert got["score"] == pytest.approx(rule["score"], abs=1e-12)
        zero = heart2016.score(results, directory, ZERO)  # "zero": a null class counts 0
        assert zero["score"] == pytest.approx(((got["Se"] or 0.0) + (got["Sp"] or 0.0)) / 2, abs=1e-12)
    else:
        assert_parts(got, exp["official"], ("Se", "Sp", "score"))


AF_PARTS = ("F1_N", "F1_A", "F1_O", "F1_noise")


@pytest.mark.parametrize("case", cases("af2017"))
def test_af2017_agrees_with_score2017challenge(case):
    exp, results, directory = answers_case("af2017", case)
    if ("af2017", case) in PREFIX_NAMES:
        assert af2017.score(results, directory) == PREFIX_NAMES["af2017", case]
        return
    if exp["official"] == "error":  # a token other than N, A, O, ~ stops the script
        assert_refused_then_mapped(af2017, results, directory, "not N, A, O or ~", "~")
        return
    got = af2017.score(results, directory)
    if exp["official"] == "NaN":  # a class absent from reference and answers: its F1 is 0/0
        values = exp["official_values"]
        for name in AF_PARTS:
            if values[name] == "NaN":
                assert got[name] is None
            else:
                assert got[name] == pytest.approx(values[name], abs=1e-9)
        three = [got[n] for n in ("F1_N", "F1_A", "F1_O") if got[n] is not None]
        four = [got[n] for n in AF_PARTS if got[n] is not None]
        assert got["score"] == pytest.approx(sum(three) / len(three), abs=1e-12)
        assert got["score_4class"] == pytest.approx(sum(four) / len(four), abs=1e-12)
        zero = af2017.score(results, directory, ZERO)
        assert zero["score"] == pytest.approx(sum(got[n] or 0.0 for n in ("F1_N", "F1_A", "F1_O")) / 3, abs=1e-12)
    else:
        assert_parts(got, exp["official"], (*AF_PARTS, "score", "score_4class"))
        assert not any(math.isnan(v) for v in got.values())
