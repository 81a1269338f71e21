"""`challenge add` scores an entry that answered nothing before any participant's entry (#59): an empty,
truncated or malformed reference, one missing a test record, or a scorer that raises on it, is refused with
the scorer's own sentence, naming the file and record, before any image is built."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.errors import ConfigError
from vmjudge.stages.score.reference_check import check_reference

from .cli import run_cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def af2017(tmp_path) -> Path:
    directory = tmp_path / "af2017"
    shutil.copytree(EXAMPLES / "af2017", directory)
    return directory


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
