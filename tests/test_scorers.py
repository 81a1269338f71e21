"""Built-in scorers against hand-computed values (the arithmetic is in the comments), and
how a scorer is found. Host-only: no VM is booted here."""

from __future__ import annotations

import hashlib
import pkgutil
import random
import subprocess
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import numpy as np
import pytest
import wfdb

import vmjudge.scorers.builtin as builtin_pkg
import vmjudge.scorers.loader as loader
from vmjudge.config import ScoreOptions
from vmjudge.errors import AnswerError, ConfigError, ScoringError
from vmjudge.queue.results import ExamResults
from vmjudge.replica.build import package_files, package_metadata
from vmjudge.scorers.builtin import (
    accuracy,
    af2017,
    alarms2015,
    beats2014,
    bxb,
    cindex,
    dice,
    heart2016,
    youth_mental_health,
)
from vmjudge.scorers.builtin.wfdb_annotations import Annotation
from vmjudge.scorers.loader import ENTRY_POINT_GROUP, builtin_names, load_scorer, scorer_version
from vmjudge.stages.score.scoring import undefined_note

# The built-in scorers setup.cfg registers; the registry (entry points) is checked against it.
BUILTINS = ("accuracy", "af2017", "alarms2015", "beats2014", "cindex", "dice", "heart2016", "youth_mental_health")
MAPPED = ScoreOptions(invalid_answers="map")
ZERO = ScoreOptions(undefined="zero")


# --- beats2014 ----------------------------------------------------------------------------

def write_ref(ref_dir: Path, record: str, samples, fs=250, symbols=None) -> None:
    """reference/RECORD.atr; fs=None writes no time resolution into the file."""
    ref_dir.mkdir(parents=True, exist_ok=True)
    wfdb.wrann(record, "atr", np.array(samples), symbol=symbols or ["N"] * len(samples), fs=fs,
               write_dir=str(ref_dir))


def qrs_bytes(tmp_path: Path, samples, symbols=None, fs=None) -> bytes:
    """The bytes of a .qrs file as an entry's next.sh would leave it."""
    out = tmp_path / "entry-out"
    out.mkdir(exist_ok=True)
    wfdb.wrann("x", "qrs", np.array(samples), symbol=symbols or ["N"] * len(samples), fs=fs, write_dir=str(out))
    data = (out / "x.qrs").read_bytes()
    (out / "x.qrs").unlink()
    return data


def beats(tmp_path: Path, files: dict) -> dict[str, float]:
    return beats2014.score(ExamResults(records=tuple(files), files=files), tmp_path / "reference")


FOUR = [250, 500, 750, 1000]  # 1 s apart at 250 Hz


def test_beats_perfect_match(tmp_path):
    write_ref(tmp_path / "reference", "100", FOUR)
    got = beats(tmp_path, {"100": qrs_bytes(tmp_path, FOUR)})
    # TP=4, FP=0, FN=0: every value is 4/4.
    assert got == {"Se_gross": 1.0, "PPV_gross": 1.0, "Se_average": 1.0, "PPV_average": 1.0, "score": 1.0}


@pytest.mark.parametrize("offset_ms, matched", [(150, True), (-150, True), (151, False), (-151, False)])
def test_beats_window_is_150_ms_inclusive(tmp_path, offset_ms, matched):
    # fs=1000 so a sample is exactly 1 ms. One reference beat at 2000, in a 10 s record.
    write_ref(tmp_path / "reference", "100", [2000], fs=1000)
    (tmp_path / "reference" / "100.hea").write_text("100 0 1000 10000\n")
    got = beats(tmp_path, {"100": qrs_bytes(tmp_path, [2000 + offset_ms])})
    # matched: TP=1 -> all 1.  Not matched: TP=0, FN=1, FP=1 -> Se = +P = 0/1 = 0.
    assert got["score"] == (1.0 if matched else 0.0)
    assert got["Se_gross"] == got["PPV_gross"] == (1.0 if matched else 0.0)


def test_beats_150_ms_apart_match_and_151_do_not_in_one_record(tmp_path):
    write_ref(tmp_path / "reference", "100", [1000, 3000], fs=1000)
    (tmp_path / "reference" / "100.hea").write_text("100 0 1000 10000\n")
    got = beats(tmp_path, {"100": qrs_bytes(tmp_path, [1150, 3151])})
    # 1150-1000 = 150 ms: TP.  3151-3000 = 151 ms: FN (3000) and FP (3151).
    # Se = 1/(1+1) = 0.5, +P = 1/(1+1) = 0.5; one record, so averages equal gross; score 0.5.
    assert got == {"Se_gross": 0.5, "PPV_gross": 0.5, "Se_average": 0.5, "PPV_average": 0.5, "score": 0.5}


def test_beats_extra_detection_is_a_false_positive(tmp_path):
    write_ref(tmp_path / "reference", "100", FOUR)
    got = beats(tmp_path, {"100": qrs_bytes(tmp_path, [250, 500, 625, 750, 1000])})
    # 625 is 125 samples = 500 ms from any beat: FP.  TP=4, FP=1, FN=0.
    # Se = 4/4 = 1, +P = 4/5 = 0.8; score = (1 + 0.8 + 1 + 0.8)/4 = 0.9.
    assert got["Se_gross"] == 1.0 and got["PPV_gross"] == pytest.approx(0.8)
    assert got["score"] == pytest.approx(0.9)


def test_beats_missed_beat_is_a_false_negative(tmp_path):
    write_ref(tmp_path / "reference", "100", FOUR)
    got = beats(tmp_path, {"100": qrs_bytes(tmp_path, [250, 500, 1000])})
    # 750 missed: TP=3, FN=1, FP=0.  Se = 3/4 = 0.75, +P = 3/3 = 1; score = (0.75+1+0.75+1)/4 = 0.875.
    assert got == {"Se_gross": 0.75, "PPV_gross": 1.0, "Se_average": 0.75, "PPV_average": 1.0, "score": 0.875}


def test_beats_nearest_test_annotation_wins(tmp_path):
    write_ref(tmp_path / "reference", "100", [1000], fs=1000)
    got = beats(tmp_path, {"100": qrs_bytes(tmp_path, [900, 1050])})
    # Both within 150 ms; 1050 is nearer (50 < 100 ms): TP=1, FP=1 (900), FN=0.
    # Se = 1, +P = 1/2; score = (1 + 0.5 + 1 + 0.5)/4 = 0.75.
    assert (got["Se_gross"], got["PPV_gross"], got["score"]) == (1.0, 0.5, 0.75)


def test_beats_gross_and_average_differ(tmp_path):
    ref = tmp_path / "reference"
    write_ref(ref, "a", FOUR)
    write_ref(ref, "b", [250, 500])
    got = beats(tmp_path, {"a": qrs_bytes(tmp_path, [250, 500, 625, 750, 1000]),  # TP=4 FP=1 FN=0
                           "b": qrs_bytes(tmp_path, [250])})                       # TP=1 FP=0 FN=1
    # Gross: TP=5, FN=1, FP=1 -> Se = 5/6, +P = 5/6.
    # Average: Se = (4/4 + 1/2)/2 = 0.75, +P = (4/5 + 1/1)/2 = 0.9.
    # score = (5/6 + 5/6 + 0.75 + 0.9)/4 = (100/60 + 99/60)/4 = 199/240.
    assert got["Se_gross"] == pytest.approx(5 / 6) and got["PPV_gross"] == pytest.approx(5 / 6)
    assert got["Se_average"] == pytest.approx(0.75) and got["PPV_average"] == pytest.approx(0.9)
    assert got["score"] == pytest.approx(199 / 240)


@pytest.mark.parametrize("answer", [
    None,                                   # failed or timed out: no file
    b"",                                    # empty file
    b"hello world, this is not wfdb",       # garbage: rdann cannot parse it (odd length)
    b"\x00\x00",                            # a valid annotation file holding nothing
    "only-non-beats",                       # rhythm and noise annotations only
], ids=["none", "empty-bytes", "garbage", "empty-annotation-file", "no-beat-annotations"])
def test_beats_record_without_beats_counts_with_zero(tmp_path, answer):
    ref = tmp_path / "reference"
    write_ref(ref, "a", FOUR)
    write_ref(ref, "b", [250, 500])
    if answer == "only-non-beats":
        answer = qrs_bytes(tmp_path, [250, 500], symbols=["+", "~"])
    got = beats(tmp_path, {"a": qrs_bytes(tmp_path, FOUR), "b": answer})
    # a: TP=4.  b: no beats -> one non-matching annotation: TP=0, FN=2, FP=1, Se = +P = 0.
    # Gross: Se = 4/(4+2) = 2/3, +P = 4/(4+1) = 0.8.  Average: Se = (1+0)/2, +P = (1+0)/2.
    # score = (2/3 + 0.8 + 0.5 + 0.5)/4 = (10/15 + 27/15)/4 = 37/60.
    assert got["Se_gross"] == pytest.approx(2 / 3) and got["PPV_gross"] == pytest.approx(0.8)
    assert got["Se_average"] == 0.5 and got["PPV_average"] == 0.5
    assert got["score"] == pytest.approx(37 / 60)


def test_beats_record_absent_from_files_is_missing(tmp_path):
    write_ref(tmp_path / "reference", "a", FOUR)
    got = beats2014.score(ExamResults(records=("a",), files={}), tmp_path / "reference")
    # TP=0, FN=4, FP=1 -> all 0.
    assert got["score"] == 0.0


def test_beats_only_beat_annotations_count(tmp_path):
    write_ref(tmp_path / "reference", "100", [250, 400, 500, 600], symbols=["N", "+", "V", "~"])
    got = beats(tmp_path, {"100": qrs_bytes(tmp_path, [250, 320, 500], symbols=["N", '"', "Q"])})
    # Reference beats 250 (N), 500 (V); test beats 250 (N), 500 (Q); the rest are not beats.
    # TP=2, FN=0, FP=0 -> score 1.
    assert got["score"] == 1.0


def test_beats_test_file_declaring_its_own_rate(tmp_path):
    write_ref(tmp_path / "reference", "100", [250, 500], fs=250)
    got = beats(tmp_path, {"100": qrs_bytes(tmp_path, [500, 1000], fs=500)})
    # 500/500 Hz = 1 s = 250/250 Hz, 1000/500 = 2 s = 500/250: both match -> score 1.
    assert got["score"] == 1.0


def test_beats_rate_from_reference_header(tmp_path):
    ref = tmp_path / "reference"
    write_ref(ref, "100", [3600], fs=None)
    (ref / "100.hea").write_text("100 0 360 7200\n")
    # Window at 360 Hz: 0.15 * 360 = 54 samples.  3654 matches (TP), 3655 would not.
    assert beats(tmp_path, {"100": qrs_bytes(tmp_path, [3654])})["score"] == 1.0
    assert beats(tmp_path, {"100": qrs_bytes(tmp_path, [3655])})["score"] == 0.0


def test_beats_unknown_rate_is_a_scoring_error(tmp_path):
    write_ref(tmp_path / "reference", "100", FOUR, fs=None)
    with pytest.raises(ScoringError, match="sampling frequency of record '100' is unknown"):
        beats(tmp_path, {"100": qrs_bytes(tmp_path, FOUR)})


def test_beats_missing_reference_file(tmp_path):
    (tmp_path / "reference").mkdir()
    with pytest.raises(ScoringError, match=r"100\.atr cannot be read \(No such file or directory\)"):
        beats(tmp_path, {"100": None})


def test_beats_refuses_answer_lines(tmp_path):
    with pytest.raises(ScoringError, match="expects style files"):
        beats2014.score(ExamResults(records=("100",), answers={"100": "1"}), tmp_path)


def anns(*times: int, code: int = 1) -> list[Annotation]:
    return [Annotation(time=t, code=code, subtype=0) for t in times]


def test_match_keeps_close_pairs_together():
    # bxb's own example (window 37 samples): ref 96, 160; test 128, 185.  128 is as far from
    # 96 as from 160 (32), but 185 is nearer to 160 (25), so 96-128 and 160-185 pair: TP=2.
    assert bxb.compare(anns(96, 160), anns(128, 185), 37, 1000) == bxb.Counts(tp=2, fn=0, fp=0)


def test_match_with_nothing():
    assert bxb.compare([], [], 10, 1000) == bxb.Counts(tp=0, fn=0, fp=0)
    assert bxb.compare(anns(5, 50), [], 10, 1000) == bxb.Counts(tp=0, fn=2, fp=0)
    assert bxb.compare([], anns(5), 10, 1000) == bxb.Counts(tp=0, fn=0, fp=1)
    # With no record length, bxb stops where the reference ends: a later test beat is not counted.
    assert bxb.compare([], anns(5), 10, 0) == bxb.Counts(tp=0, fn=0, fp=0)
    assert bxb.compare(anns(5), anns(5, 50), 10, 0) == bxb.Counts(tp=1, fn=0, fp=0)


@pytest.mark.parametrize("frequency, samples", [(250, 38), (125, 19), (360, 54), (257, 39), (1000, 150)])
def test_window_is_015_s_rounded_to_whole_samples(frequency, samples):
    # strtim(".15"): 0.15 * 250 = 37.5 -> 38 samples (152 ms), 18.75 -> 19, 54, 38.55 -> 39, 150.
    assert bxb.window(frequency) == samples


def test_beats_38_samples_late_at_250_hz_is_a_match(tmp_path):
    # The example: the 2014 records are 250 Hz, where bxb's window is 38 samples (152 ms).
    write_ref(tmp_path / "reference", "100", [1000])
    (tmp_path / "reference" / "100.hea").write_text("100 0 250 2500\n")
    assert beats(tmp_path, {"100": qrs_bytes(tmp_path, [1038])})["score"] == 1.0
    # 39 samples: a miss and an extra, Se = +P = 0.
    assert beats(tmp_path, {"100": qrs_bytes(tmp_path, [1039])})["score"] == 0.0


def test_beats_flutter_wave_takes_part_but_is_no_beat(tmp_path):
    # A reference "!" matched by a test beat makes that test beat an extra (bxb's On'); the
    # reference N at 2000 is matched: TP=1, FP=1, FN=0.
    write_ref(tmp_path / "reference", "100", [1000, 2000], symbols=["!", "N"])
    (tmp_path / "reference" / "100.hea").write_text("100 0 250 5000\n")
    got = beats(tmp_path, {"100": qrs_bytes(tmp_path, [1000, 2000])})
    assert (got["Se_gross"], got["PPV_gross"]) == (1.0, 0.5)


# --- answer-lines scorers -----------------------------------------------------------------

def reference(tmp_path: Path, text: str) -> Path:
    ref = tmp_path / "reference"
    ref.mkdir(exist_ok=True)
    (ref / "REFERENCE.csv").write_text(text)
    return ref


def lines(answers: dict) -> ExamResults:
    return ExamResults(records=tuple(answers), answers=answers)


def test_alarms2015(tmp_path):
    ref = reference(tmp_path, "a1,1\na2,1\na3,1\na4,0\na5,0\na6,0\na7,1\nnot-tested,1\n")
    got = alarms2015.score(lines({
        "a1": "1",     # true alarm kept: TP
        "a2": "0",     # true alarm suppressed: FN
        "a3": None,    # missing = 0: FN
        "a4": "0",     # false alarm suppressed: TN
        "a5": "1",     # false alarm kept: FP
        "a6": None,    # missing = 0: TN
        "a7": "yes",   # not a number: mapped to 0 (invalid_answers = "map"): FN
    }), ref, MAPPED)
    # TP=1, TN=2, FP=1, FN=3: score = (1+2)/(1+2+1+5*3) = 3/19.
    assert got == {"TP": 1.0, "TN": 2.0, "FP": 1.0, "FN": 3.0, "score": pytest.approx(3 / 19)}


def test_alarms2015_any_nonzero_number_is_a_true_alarm(tmp_path):
    # As the official script's `this_answer ~= 0`: "2" on a true alarm is TP, "-1" on a false one FP.
    ref = reference(tmp_path, "a1,1\na2,0\na3,1\n")
    got = alarms2015.score(lines({"a1": "2", "a2": "-1", "a3": "0.0"}), ref)
    # TP=1, FP=1, FN=1 (0.0 is zero): score = 1/(1+1+5) = 1/7.
    assert got == {"TP": 1.0, "TN": 0.0, "FP": 1.0, "FN": 1.0, "score": pytest.approx(1 / 7)}


def test_alarms2015_non_numeric_answer_is_refused_by_default(tmp_path):
    ref = reference(tmp_path, "a1,1\na2,0\n")
    with pytest.raises(AnswerError, match=r"^1 test record\(s\) have an answer the official alarms2015 scorer "
                                         r"refuses; ") as info:
        alarms2015.score(lines({"a1": "true", "a2": "0"}), ref)
    assert info.value.detail.startswith("the first: a1,true (not a number")


def test_alarms2015_all_right(tmp_path):
    ref = reference(tmp_path, "a1,1\na2,0\n")
    # TP=1, TN=1: 2/2.
    assert alarms2015.score(lines({"a1": "1", "a2": "0"}), ref)["score"] == 1.0


def test_heart2016(tmp_path):
    ref = reference(tmp_path, "\n".join([
        "h1,1,1", "h2,1,1", "h3,1,1", "h4,1,1",   # abnormal, clean
        "h5,1,0", "h6,1,0",                       # abnormal, noisy
        "h7,-1,1", "h8,-1,1", "h9,-1,1",          # normal, clean
        "h10,-1,0", "h11,-1,0",                   # normal, noisy
    ]) + "\n")
    got = heart2016.score(lines({
        "h1": "1", "h2": "0", "h3": "-1", "h4": "1",   # Aa1=2, Aq1=1, An1=1
        "h5": "0", "h6": "-1",                         # Aa2=0, Aq2=1, An2=1
        "h7": "-1", "h8": None, "h9": "1",             # Nn1=1, Nq1=1 (missing = 0), Na1=1
        "h10": "-1", "h11": "1",                       # Nn2=1, Nq2=0, Na2=1
    }), ref)
    # wa1 = 4/6, wa2 = 2/6: Se = (2/3)(2/4) + (1/3)(0+1)/2 = 1/3 + 1/6 = 1/2.
    # wn1 = 3/5, wn2 = 2/5: Sp = (3/5)(1/3) + (2/5)(1+0)/2 = 1/5 + 1/5 = 2/5.
    # score = (1/2 + 2/5)/2 = 9/20.
    assert got["Se"] == pytest.approx(0.5) and got["Sp"] == pytest.approx(0.4)
    assert got["score"] == pytest.approx(0.45)


def test_heart2016_empty_parts_are_left_out_and_an_absent_class_is_null(tmp_path):
    # No noisy records: wa1 = wn1 = 1, the noisy terms (0/0, weight 0) are left out.
    ref = reference(tmp_path, "h1,1,1\nh2,1,1\nh3,-1,1\n")
    got = heart2016.score(lines({"h1": "1", "h2": "-1", "h3": "-1"}), ref)
    # Se = 1 * 1/2 = 0.5, Sp = 1 * 1/1 = 1, score 0.75.
    assert (got["Se"], got["Sp"], got["score"]) == (0.5, 1.0, 0.75)
    # No abnormal record at all: Se is 0/0, null; Sp = 1; "omit": score = Sp; "zero": (0 + 1)/2.
    ref = reference(tmp_path, "h3,-1,1\n")
    assert heart2016.score(lines({"h3": "-1"}), ref) == {"Se": None, "Sp": 1.0, "score": 1.0}
    assert heart2016.score(lines({"h3": "-1"}), ref, ZERO) == {"Se": None, "Sp": 1.0, "score": 0.5}


def test_heart2016_unsure_counts_on_noisy_records_only(tmp_path):
    ref = reference(tmp_path, "h1,1,1\nh2,1,0\n")
    got = heart2016.score(lines({"h1": "0", "h2": "0"}), ref)
    # wa1 = wa2 = 1/2: Se = (1/2)(0/1) + (1/2)(0+1)/1 = 0.5.  No normals: Sp null.  score = Se.
    assert got == {"Se": 0.5, "Sp": None, "score": 0.5}


def test_af2017(tmp_path):
    ref = reference(tmp_path, "r1,N\nr2,N\nr3,N\nr4,A\nr5,A\nr6,O\nr7,~\n")
    got = af2017.score(lines({
        "r1": "N", "r2": "N", "r3": "A",   # N: 2 right, 1 called A
        "r4": "A", "r5": None,             # A: 1 right, 1 missing (= ~)
        "r6": "X",                         # O answered with an unknown label (mapped to ~)
        "r7": "~",                         # ~: right
    }), ref, MAPPED)
    # Reference counts N=3, A=2, O=1, ~=1; answer counts N=2, A=2, O=0, ~=3; correct N=2, A=1, O=0, ~=1.
    # F1_N = 2*2/(3+2) = 0.8, F1_A = 2*1/(2+2) = 0.5, F1_O = 0/(1+0) = 0, F1_~ = 2*1/(1+3) = 0.5.
    # score = (0.8+0.5+0)/3 = 13/30; score_4class = (0.8+0.5+0+0.5)/4 = 0.45.
    assert got["F1_N"] == pytest.approx(0.8) and got["F1_A"] == 0.5
    assert got["F1_O"] == 0.0 and got["F1_noise"] == 0.5
    assert got["score"] == pytest.approx(13 / 30) and got["score_4class"] == pytest.approx(0.45)


def test_af2017_class_absent_everywhere_is_null(tmp_path):
    ref = reference(tmp_path, "r1,N\nr2,N\n")
    got = af2017.score(lines({"r1": "N", "r2": "N"}), ref)
    # F1_N = 4/4 = 1; A, O, ~ have 0 reference and 0 answers: 0/0, null.  "omit": score = 1.
    assert got == {"F1_N": 1.0, "F1_A": None, "F1_O": None, "F1_noise": None, "score": 1.0, "score_4class": 1.0}
    # "zero": the null parts count 0: score = 1/3, score_4class = 1/4.
    zero = af2017.score(lines({"r1": "N", "r2": "N"}), ref, ZERO)
    assert zero["score"] == pytest.approx(1 / 3) and zero["score_4class"] == 0.25


def test_af2017_unknown_label_is_refused_by_default(tmp_path):
    ref = reference(tmp_path, "r1,N\n")
    with pytest.raises(AnswerError) as info:
        af2017.score(lines({"r1": "n"}), ref)
    assert info.value.detail == "the first: r1,n (not N, A, O or ~ (case matters))"


def test_accuracy(tmp_path):
    ref = reference(tmp_path, "r1,cat\nr2,dog\nr3,cat\nr4,Cat\n")
    got = accuracy.score(lines({"r1": "cat", "r2": " dog\n", "r3": None, "r4": "cat"}), ref)
    # r1 right; r2 right (surrounding whitespace ignored); r3 missing; r4 wrong (case matters): 2/4.
    assert got == {"correct": 2.0, "records": 4.0, "score": 0.5}


def test_accuracy_no_records_scores_zero(tmp_path):
    ref = reference(tmp_path, "r1,cat\n")
    assert accuracy.score(lines({}), ref) == {"correct": 0.0, "records": 0.0, "score": 0.0}


# --- reading REFERENCE.csv (shared by the answer-lines scorers) ---------------------------

def test_reference_blank_lines_and_whitespace_are_ignored(tmp_path):
    ref = reference(tmp_path, "\n  r1 , 1  \n\n\tr2,0\n\n")
    # r1: TP, r2: TN -> 2/2.
    assert alarms2015.score(lines({"r1": "1", "r2": "0"}), ref)["score"] == 1.0


@pytest.mark.parametrize("scorer, text, bad_line", [
    (accuracy, "r1,cat\nr2\n", 2),                 # no label
    (accuracy, "r1,cat,extra\n", 1),               # one field too many
    (accuracy, "r1,\n", 1),                        # empty label
    (alarms2015, "\nr1,1\nr2,2\n", 3),             # 2 is not 0 or 1 (blank lines still counted)
    (heart2016, "r1,1,1\nr2,0,1\n", 2),            # label 0 is not 1 or -1
    (heart2016, "r1,1\n", 1),                      # quality missing
    (af2017, "r1,N\nr2,n\n", 2),                   # lower case n
])
def test_reference_malformed_line(tmp_path, scorer, text, bad_line):
    ref = reference(tmp_path, text)
    with pytest.raises(ScoringError) as err:
        scorer.score(lines({"r1": None}), ref)
    assert f"{ref / 'REFERENCE.csv'} line {bad_line}" in str(err.value)


def test_reference_repeated_record(tmp_path):
    ref = reference(tmp_path, "r1,cat\nr1,dog\n")
    with pytest.raises(ScoringError, match="line 2 repeats record 'r1'"):
        accuracy.score(lines({"r1": "cat"}), ref)


@pytest.mark.parametrize("scorer", [accuracy, alarms2015, af2017])
def test_reference_missing_a_test_record(tmp_path, scorer):
    ref = reference(tmp_path, "r1,A\n" if scorer is af2017 else "r1,1\n")
    with pytest.raises(ScoringError) as err:
        scorer.score(lines({"r1": "1", "r9": "1"}), ref)
    assert "no line for test record 'r9'" in str(err.value) and str(ref / "REFERENCE.csv") in str(err.value)


def test_reference_file_missing(tmp_path):
    (tmp_path / "reference").mkdir()
    with pytest.raises(ScoringError, match="REFERENCE.csv cannot be read"):
        accuracy.score(lines({"r1": "1"}), tmp_path / "reference")


@pytest.mark.parametrize("scorer", [accuracy, alarms2015, heart2016, af2017])
def test_answer_scorers_refuse_files(tmp_path, scorer):
    ref = reference(tmp_path, "r1,1,1\n")
    with pytest.raises(ScoringError, match="expects style answer-lines"):
        scorer.score(ExamResults(records=("r1",), files={"r1": b""}), ref)


# --- finding a scorer ---------------------------------------------------------------------

@pytest.mark.parametrize("name", BUILTINS)
def test_load_builtin(name):
    module = {"accuracy": accuracy, "af2017": af2017, "alarms2015": alarms2015,
              "beats2014": beats2014, "cindex": cindex, "dice": dice, "heart2016": heart2016,
              "youth_mental_health": youth_mental_health}[name]
    assert load_scorer(name).func is module.score
    assert scorer_version(name) == f"{name}/{1 if name in ('accuracy', 'cindex', 'dice', 'youth_mental_health') else 2}"
    assert scorer_version(name, ScoreOptions(undefined="zero")) == f"{name}/{module.VERSION} undefined=zero"


def write_module(tmp_path, monkeypatch, name: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("def score(results, reference):\n    return {'score': 0.25}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return path


def test_load_module_function(tmp_path, monkeypatch):
    path = write_module(tmp_path, monkeypatch, "vmj_test_scorer_a")
    scorer = load_scorer("vmj_test_scorer_a:score")
    assert scorer(ExamResults(records=()), tmp_path) == {"score": 0.25}
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    assert scorer_version("vmj_test_scorer_a:score") == f"vmj_test_scorer_a:score@{digest}"


def test_load_entry_point(tmp_path, monkeypatch):
    path = write_module(tmp_path, monkeypatch, "vmj_test_scorer_b")
    ep = EntryPoint(name="mine", value="vmj_test_scorer_b:score", group="vmjudge.scorers")
    monkeypatch.setattr(loader, "entry_points",
                        lambda group, name: [ep] if (group, name) == ("vmjudge.scorers", "mine") else [])
    assert load_scorer("mine")(ExamResults(records=()), tmp_path) == {"score": 0.25}
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    assert scorer_version("mine") == f"vmj_test_scorer_b:score@{digest}"


@pytest.mark.parametrize("builtin_first", [True, False])
def test_builtin_wins_over_an_entry_point_of_the_same_name(monkeypatch, builtin_first):
    (real,) = entry_points(group=ENTRY_POINT_GROUP, name="accuracy")
    ep = EntryPoint(name="accuracy", value="os:getcwd", group="vmjudge.scorers")
    registered = [real, ep] if builtin_first else [ep, real]
    monkeypatch.setattr(loader, "entry_points", lambda group, name: registered)
    assert load_scorer("accuracy").func is accuracy.score
    assert scorer_version("accuracy") == "accuracy/1"


def test_unknown_scorer_names_it_and_lists_builtins():
    with pytest.raises(ConfigError) as err:
        load_scorer("beats2013")
    text = str(err.value)
    assert "'beats2013'" in text and "vmjudge.scorers" in text
    for name in BUILTINS:
        assert name in text


@pytest.mark.parametrize("spec, words", [
    ("vmj_no_such_module_xyz:score", ["cannot be loaded", "'vmj_no_such_module_xyz'", "ModuleNotFoundError"]),
    ("vmjudge.scorers.builtin.accuracy:nothere", ["has no 'nothere'"]),
    ("vmjudge.scorers.builtin.accuracy:VERSION", ["is not callable"]),
])
def test_bad_module_function(spec, words):
    with pytest.raises(ConfigError) as err:
        load_scorer(spec)
    for w in words:
        assert w in str(err.value)


def test_the_installed_package_registers_each_builtin_scorer_by_entry_point():
    """The real vmjudge.scorers group of the installed distribution (pip install -e .), not a
    patched one: a challenge's own package finds the built-ins there under their names."""
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.dist.name == "vmjudge"}
    assert sorted(found) == sorted(BUILTINS)
    assert builtin_names() == BUILTINS
    for name, ep in found.items():
        assert ep.value == f"vmjudge.scorers.builtin.{name}:score"
        assert ep.load() is load_scorer(name).func


def test_every_scorer_in_the_builtin_folder_is_registered():
    """The entry points are the only registry: a scorer module added to builtin/ without its
    line in setup.cfg could not be named by any challenge."""
    helpers = {"bxb", "wfdb_annotations"}
    modules = {m.name for m in pkgutil.iter_modules(builtin_pkg.__path__)}
    assert modules - helpers == set(BUILTINS) and helpers <= modules


def test_the_replicas_uninstalled_copy_finds_the_builtins_through_the_metadata_it_carries(tmp_path):
    """vmjudge-replica runs vmjudge from the CD, not installed: the built-ins are found (for
    stage 2's answer check and the training scores) only because the CD carries vmjudge's
    entry points beside the sources. -S: nothing of this test's own installation is seen."""
    python = tmp_path / "python"
    for name, source in {**package_files(), **package_metadata()}.items():
        (python / name).parent.mkdir(parents=True, exist_ok=True)
        (python / name).write_bytes(source if isinstance(source, bytes) else source.read_bytes())
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from vmjudge.scorers import loader; "
            "print(loader.__file__, loader.builtin_names(), loader.scorer_version('af2017'), "
            "loader.answer_check('af2017') is not None, loader.load_scorer('heart2016').func.__module__)")

    def run() -> str:
        proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", code, str(python)], capture_output=True,
                              text=True, timeout=120)
        return proc.stdout.strip() or proc.stderr.strip().splitlines()[-1]

    assert run() == (f"{python / 'vmjudge/scorers/loader.py'} {BUILTINS} af2017/2 True "
                     "vmjudge.scorers.builtin.heart2016")
    for path in (python / "vmjudge.dist-info").iterdir():
        path.unlink()
    assert "Unknown scorer 'af2017': use a built-in ()" in run()


def test_the_report_notes_undefined_parts_and_the_rule_applied():
    from_omit = undefined_note({"Se": None, "Sp": 1.0, "score": 1.0}, ScoreOptions())
    assert from_omit == (" Se is undefined (0/0: the test set has no record of that kind, where the official "
                         "scoring code gives NaN), left out of score, which averages the parts that are defined "
                         "(challenge.toml [score] undefined = \"omit\").")
    from_zero = undefined_note({"F1_A": None, "F1_O": None, "score": 0.25}, ZERO)
    assert from_zero.startswith(" F1_A, F1_O are undefined") and "counted as 0 in score" in from_zero
    assert undefined_note({"score": 0.5}, ScoreOptions()) == ""


def test_beats2014_hostile_annotation_bytes_fail_the_record_never_the_scorer(tmp_path):
    """A test file is whatever the entry wrote: a resolution note that overflows the rate
    conversion, a flood of SKIPs, random bytes. Each is the entry's failed record (one
    non-matching annotation), never an exception that would file it as a scoring error."""
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    wfdb.wrann("r1", "atr", np.array([100, 400, 700]), np.array(["N"] * 3), fs=250, write_dir=str(ref_dir))
    note = b"## time resolution: 1e-320"
    tiny = (bytes([0, 22 << 2]) + bytes([len(note), 63 << 2]) + note + b"\x00" * (len(note) & 1)
            + bytes([100, 1 << 2]) + b"\x00\x00")
    skips = (bytes([0, 59 << 2]) + b"\xff\x7f\xff\xff") * 1000 + bytes([1, 1 << 2]) + b"\x00\x00"
    rnd = random.Random(7)
    for answer in [tiny, skips] + [rnd.randbytes(rnd.randrange(2, 400)) for _ in range(200)]:
        got = beats2014.score(ExamResults(records=("r1",), files={"r1": answer}), ref_dir)
        assert 0.0 <= got["score"] <= 1.0 and all(v is None or 0.0 <= v <= 1.0 for v in got.values()), answer
