"""`challenge add` scores an entry that answered nothing before any participant's entry (#59): an empty,
truncated or malformed reference, one missing a test record, or a scorer that raises on it, is refused with
the scorer's own sentence, naming the file and record, before any image is built. And a built-in scorer
scores the reference against itself: a reference on which an entry right everywhere would not score the
scorer's best is refused with one sentence saying what came out."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import wfdb

from vmjudge.config import load_challenge
from vmjudge.errors import ConfigError
from vmjudge.scorers.loader import builtin_names
from vmjudge.stages.score.reference_check import NOT_TRIED, OWN_ANSWERS, check_reference, own_answers_scores

from .cli import run_cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def af2017(tmp_path) -> Path:
    directory = tmp_path / "af2017"
    shutil.copytree(EXAMPLES / "af2017", directory)
    return directory


def copied(tmp_path: Path, example: str) -> Path:
    directory = tmp_path / example.replace("/", "-")
    shutil.copytree(EXAMPLES / example, directory)
    return directory


def set_score_option(directory: Path, line: str) -> None:
    """A line added to challenge.toml's [score]."""
    toml = directory / "challenge.toml"
    toml.write_text(toml.read_text().replace("[score]\n", f"[score]\n{line}\n", 1))


def refusal(directory: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        check_reference(load_challenge(directory))
    return str(caught.value)


@pytest.mark.parametrize("example", ["af2017", "alarms2015", "beats2014", "drivendata-style", "drivendata-stepped",
                                     "segment2025", "hecktor2025/task1", "hecktor2025/task2"])
def test_every_examples_reference_is_scored(example):
    check_reference(load_challenge(EXAMPLES / example))


def test_an_empty_truncated_or_malformed_reference_is_refused(af2017):
    reference = af2017 / "reference" / "REFERENCE.csv"
    lines = reference.read_text().splitlines(keepends=True)
    reference.write_text("")
    assert "has no line for test record 'B0001' (nor for 7 more)" in refusal(af2017)
    reference.write_text("".join(lines[:-1]))
    assert "has no line for test record 'B0008'" in refusal(af2017)
    reference.write_text("".join(lines[:-1]) + "B0008,Q\n")
    said = refusal(af2017)
    assert "REFERENCE.csv" in said and "line 8" in said
    reference.unlink()
    assert "reference" in refusal(af2017)


def test_an_installed_scorer_that_raises_on_the_reference_is_refused(af2017, tmp_path, monkeypatch):
    """An organiser's scorer installed as a module (a file of the challenge's runs only in a VM, isolated)."""
    raising = "def score(results, reference):\n    raise KeyError('no column B')\n"
    (tmp_path / "organisers_scorer.py").write_text(raising)
    monkeypatch.syspath_prepend(str(tmp_path))
    toml = af2017 / "challenge.toml"
    toml.write_text(toml.read_text().replace('scorer = "af2017"', 'scorer = "organisers_scorer:score"'))
    assert "no column B" in refusal(af2017)


def test_challenge_add_refuses_before_building_anything(af2017, tmp_path):
    (af2017 / "reference" / "REFERENCE.csv").write_text("B0001,A\n")
    done = run_cli("challenge", "add", str(af2017), home=tmp_path / "home")
    assert done.returncode != 0 and "has no line for test record 'B0002'" in done.stderr
    assert not (tmp_path / "home" / "images").exists() or not any((tmp_path / "home" / "images").iterdir())


@pytest.mark.parametrize("example", ["af2017", "alarms2015", "beats2014", "drivendata-style", "drivendata-stepped",
                                     "segment2025", "hecktor2025/task1"])
def test_every_examples_reference_scores_best_against_itself(example):
    """Tried, not skipped: each test set (each phase's) gives its built-in scorer's best, 1."""
    ch = load_challenge(EXAMPLES / example)
    views = [ch.in_phase(p.name) for p in ch.phases] or [ch]
    found = [own_answers_scores(view) for view in views]
    assert [(best, scores["score"]) for best, scores in found] == [(1.0, 1.0)] * len(views)


def test_a_scorer_whose_reference_holds_no_answer_is_not_tried():
    ch = load_challenge(EXAMPLES / "hecktor2025" / "task2")  # cindex: times and events, not risks
    assert [own_answers_scores(ch.in_phase(p.name)) for p in ch.phases] == [None] * len(ch.phases)


def test_every_builtin_scorer_is_tried_or_said_why_not():
    assert set(OWN_ANSWERS) | set(NOT_TRIED) == set(builtin_names())
    assert not set(OWN_ANSWERS) & set(NOT_TRIED)
    assert all(best == 1.0 for best, _ in OWN_ANSWERS.values())


def test_a_test_set_of_only_noisy_recordings_is_refused(af2017):
    """af2017 ranks by the F1 of N, A and O: with every test record "~" none is defined, so score is 0."""
    reference = af2017 / "reference" / "REFERENCE.csv"
    reference.write_text("".join(f"B000{n},~\n" for n in range(1, 9)))
    said = refusal(af2017)
    assert said.startswith(f"The reference {af2017 / 'reference'}, given to the scorer af2017 as an entry's answers, "
                           "scores 0, not the best 1, so an entry right on every test record would not score best (")
    assert "F1_N null, F1_A null, F1_O null, F1_noise 1, score 0, score_4class 1" in said
    assert "F1_N, F1_A, F1_O are null (0/0" in said and "undefined = \"omit\" leaves out of score" in said
    assert said.count(". ") == 0 and said.endswith("add the challenge again.")


def test_a_class_missing_from_the_test_set_is_refused_when_it_counts_as_zero(af2017):
    reference = af2017 / "reference" / "REFERENCE.csv"
    reference.write_text(reference.read_text().replace(",A\n", ",N\n"))  # no AF record left
    check_reference(load_challenge(af2017))  # undefined = "omit": F1_A is left out, the rest is 1
    set_score_option(af2017, 'undefined = "zero"')
    said = refusal(af2017)
    assert "scores 0.666667, not the best 1" in said and "F1_A null" in said
    assert "F1_A is null (0/0: the test set has nothing of that kind), which [score] undefined = \"zero\" counts " \
           "as 0 in score" in said


def test_heart2016s_reference_is_read_as_its_label_and_refused_without_abnormal_recordings(af2017):
    """heart2016's reference lines are RECORD,LABEL,QUALITY: the answer an entry gives is the LABEL."""
    toml = af2017 / "challenge.toml"
    toml.write_text(toml.read_text().replace('scorer = "af2017"', 'scorer = "heart2016"'))
    reference = af2017 / "reference" / "REFERENCE.csv"
    lines = [f"B000{n},{'1' if n % 2 else '-1'},{'0' if n % 3 == 0 else '1'}\n" for n in range(1, 9)]  # 3, 6 noisy
    reference.write_text("".join(lines))
    best, scores = own_answers_scores(load_challenge(af2017))
    assert (best, scores) == (1.0, {"Se": 1.0, "Sp": 1.0, "score": 1.0})
    check_reference(load_challenge(af2017))
    reference.write_text("".join(f"B000{n},-1,1\n" for n in range(1, 9)))
    set_score_option(af2017, 'undefined = "zero"')
    said = refusal(af2017)
    assert "scores 0.5, not the best 1" in said and "(Se null, Sp 1, score 0.5)" in said


def test_a_record_whose_reference_marks_no_beat_is_refused(tmp_path):
    """beats2014 counts a record answered with no beat as failed (one false positive): an entry that
    reproduces a reference without beats for a record scores below 1 on it."""
    directory = copied(tmp_path, "beats2014")
    (directory / "reference" / "203.atr").unlink()
    wfdb.wrann("203", "atr", np.array([100]), symbol=["~"], fs=250, write_dir=str(directory / "reference"))
    said = refusal(directory)
    assert said.startswith(f"The reference {directory / 'reference'}, given to the scorer beats2014 as an entry's "
                           "answers, scores 0.956597, not the best 1")
    assert "(Se_gross 1, PPV_gross 0.993056, Se_average 1, PPV_average 0.833333, score 0.956597)" in said


def test_a_lesion_free_reference_mask_is_refused_when_it_counts_as_zero(tmp_path):
    directory = copied(tmp_path, "segment2025")
    mask = directory / "reference" / "REFERENCE-case12.mha"
    data = mask.read_bytes()
    start = data.index(b"ElementDataFile = LOCAL\n") + len(b"ElementDataFile = LOCAL\n")
    mask.write_bytes(data[:start] + bytes(len(data) - start))  # every voxel background
    check_reference(load_challenge(directory))  # "omit": case12's 0/0 Dice is left out of the mean
    set_score_option(directory, 'undefined = "zero"')
    said = refusal(directory)
    assert "given to the scorer dice as an entry's answers, scores 0.666667, not the best 1" in said
    assert "undefined_records 1" in said


def test_a_variable_the_test_set_never_shows_is_refused(tmp_path):
    """DrivenData's F1 of a binary variable with no positive is 0: an entry right everywhere scores below 1."""
    directory = copied(tmp_path, "drivendata-style")
    labels = directory / "reference" / "test_labels.csv"
    lines = labels.read_text().splitlines()
    column = lines[0].split(",").index("SuicideNote")
    lines[1:] = [",".join("0" if i == column else v for i, v in enumerate(line.split(","))) for line in lines[1:]]
    labels.write_text("\n".join(lines) + "\n")
    said = refusal(directory)
    assert "given to the scorer youth_mental_health as an entry's answers, scores 0.956522, not the best 1" in said
    assert "binary_f1 0.952381" in said


def test_a_submission_format_the_label_scorer_cannot_read_is_refused(tmp_path):
    """accuracy reads one label per id: a format with two columns beside it would fail every submission."""
    directory = copied(tmp_path, "drivendata-stepped")
    for fmt in (directory / "test" / "steps").glob("*/submission_format.csv"):
        lines = fmt.read_text().splitlines()
        fmt.write_text("\n".join([lines[0] + ",runway", *(line + ",unknown" for line in lines[1:])]) + "\n")
    said = refusal(directory)
    assert said.startswith("The scorer accuracy cannot score the answers of ")
    assert "reads one label per id, but the submission format has 2 columns beside its id (config, runway)" in said


def test_challenge_add_refuses_a_reference_short_of_its_best(af2017, tmp_path):
    (af2017 / "reference" / "REFERENCE.csv").write_text("".join(f"B000{n},~\n" for n in range(1, 9)))
    done = run_cli("challenge", "add", str(af2017), home=tmp_path / "home")
    assert done.returncode != 0 and "scores 0, not the best 1" in done.stderr
