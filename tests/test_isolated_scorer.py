"""[score] isolate = true (#56) on the host: the challenge's scorer file read and refused in a sentence,
compiled at `challenge add` but never run by the judge, and laid out on the scoring VM's CD (the file,
vmjudge's sources, the archived results, the reference and nothing else). The CD's runner, in_vm.py, is
run here by Debian's own python3 (isolated: no site, no venv), as the guest runs it, and gives what the
scorer gives when called directly. In real VMs: tests/test_isolated_scorer_vm.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.errors import ConfigError, ScoringError
from vmjudge.queue import results
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.loader import compile_scorer
from vmjudge.stages.score.isolated import CD, RUNNER, refused_answer, scorer_version, scoring_media
from vmjudge.stages.score.scoring import named_scores

from .test_challenge_new import new_challenge

# The docs' scorer (docs/authors.md, "Writing a scorer"), and who ran it.
EXACT = '''import os
from pathlib import Path


def exact(results, reference: Path) -> dict[str, float]:
    labels = dict(line.split(",", 1) for line in (reference / "REFERENCE.csv").read_text().split())
    right = sum(1 for r in results.records if (results.answers or {}).get(r) == labels.get(r))
    return {"correct": float(right), "score": right / len(results.records), "uid": float(os.getuid())}
'''
ISOLATED = '[score]\nscorer = "scoring.py:exact"\nisolate = true\n'


def isolated_challenge(tmp_path: Path, score: str = ISOLATED, scorer: str = EXACT) -> Path:
    directory = tmp_path / "iso"
    assert new_challenge(directory, "answer-lines", "accuracy").returncode == 0
    text = (directory / "challenge.toml").read_text()
    (directory / "challenge.toml").write_text(text[:text.index("\n[score]\n") + 1] + score)
    (directory / "scoring.py").write_text(scorer)
    return directory


def test_an_isolated_scorer_is_read_from_the_challenge_directory(tmp_path):
    ch = load_challenge(isolated_challenge(tmp_path))
    assert ch.isolated is not None and ch.scored_in_vm and ch.evaluation is None
    assert (ch.isolated.file, ch.isolated.function, ch.scorer) == (tmp_path / "iso" / "scoring.py", "exact",
                                                                   "scoring.py:exact")
    assert scorer_version(ch).startswith("scoring.py:exact@")
    assert not load_challenge(isolated_challenge(tmp_path / "host", "[score]\nscorer = \"accuracy\"\n")).scored_in_vm


@pytest.mark.parametrize("score, said", [
    ('[score]\nscorer = "scoring.py:exact"\n', "which vmjudge runs only in a VM: add isolate = true"),
    ('[score]\nscorer = "accuracy"\nisolate = true\n', 'give scorer = "scoring.py:function"'),
    ('[score]\nscorer = "missing.py:exact"\nisolate = true\n', "missing.py is not a file"),
    ('[score]\nscorer = "scoring.py:exact"\nisolate = "yes"\n', r"\[score\] isolate = 'yes' is not allowed"),
    ('[score]\nscorer = "../scoring.py:exact"\nisolate = true\n', "is not allowed"),
])
def test_an_isolated_scorer_that_is_wrong_is_refused_in_a_sentence(tmp_path, score, said):
    with pytest.raises(ConfigError, match=said):
        load_challenge(isolated_challenge(tmp_path, score))


def test_the_judge_compiles_the_scorer_file_and_never_runs_it(tmp_path):
    marker = tmp_path / "ran"
    directory = isolated_challenge(tmp_path, scorer=f"open({str(marker)!r}, 'w').write('ran')\n" + EXACT)
    compile_scorer(directory / "scoring.py")
    assert not marker.exists()
    (directory / "scoring.py").write_text("def exact(results, reference):\n    return {'score': 1\n")
    with pytest.raises(ConfigError, match=r"scoring.py is not valid Python: line 2"):
        compile_scorer(directory / "scoring.py")


def answers(ch) -> ExamResults:
    labels = dict(line.split(",", 1) for line in (ch.reference_dir / "REFERENCE.csv").read_text().split())
    given = {r: labels[r] for r in ch.test}
    given[ch.test[0]] = "wrong"
    return ExamResults(records=ch.test, answers=given)


def run_as_the_guest(tmp_path: Path, media: dict) -> dict:
    """The CD laid out as the guest sees it, its score/ linked into a home, and the CD's runner run there by
    Debian's own python3 (isolated: no site, no venv); what it wrote to scores.json."""
    home = tmp_path / "home"
    for name, value in media.items():
        target = tmp_path / "cdrom" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(value.read_bytes() if isinstance(value, Path) else value)
    home.mkdir()
    (home / CD).symlink_to(tmp_path / "cdrom" / CD)
    done = subprocess.run(["/usr/bin/python3", "-I", RUNNER, "scoring.py", "exact"], cwd=home, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads((home / "scores.json").read_text())


def archived_answers(ch) -> tuple[ExamResults, bytes]:
    exam = answers(ch)
    return exam, results.encode(exam.records, dict.fromkeys(exam.records, "ok"), "answer-lines", answers=exam.answers)


def test_the_cd_runner_gives_what_the_scorer_gives_in_debians_own_python(tmp_path):
    ch = load_challenge(isolated_challenge(tmp_path))
    exam, archived = archived_answers(ch)
    assert results.decode(archived) == exam
    media = scoring_media(ch, archived)
    assert {name.split("/")[1] for name in media} == {"scoring.py", "results.json", "lib", "reference"}
    assert f"{CD}/reference/REFERENCE.csv" in media and RUNNER in media
    assert not any("/test/" in name or "training" in name for name in media)
    returned = run_as_the_guest(tmp_path, media)
    namespace: dict = {}
    exec(compile(EXACT, "scoring.py", "exec"), namespace)
    assert returned == namespace["exact"](exam, ch.reference_dir)
    assert returned["score"] == (len(ch.test) - 1) / len(ch.test)


REFUSES = '''from vmjudge.errors import AnswerError


def exact(results, reference):
    raise AnswerError("An answer of the test set is not one the official scorer takes.", "record t03: 'maybe'")
'''


def test_answers_the_scorer_refuses_fail_the_entry_as_on_the_host(tmp_path):
    """vmjudge.errors.AnswerError from the scorer (the built-ins' invalid_answers = "refuse") is the entry's
    fault: the CD's runner says so in scores.json, and the stage fails the entry, its detail the organiser's."""
    ch = load_challenge(isolated_challenge(tmp_path, scorer=REFUSES))
    _, archived = archived_answers(ch)
    outcome = refused_answer(run_as_the_guest(tmp_path, scoring_media(ch, archived)))
    assert outcome is not None and (outcome.status, outcome.reason) == ("failed", "invalid-answer")
    assert outcome.message.startswith("An answer of the test set is not one") and "t03" not in outcome.message
    assert outcome.manifest["refused_answer"] == "record t03: 'maybe'"
    assert refused_answer({"score": 1.0}) is None and refused_answer({"vmjudge_answer_error": "x"}) is None


def test_scores_too_large_for_a_float_are_the_scorers_fault_in_a_sentence():
    with pytest.raises(ScoringError, match="every score must be a finite number"):
        named_scores("scoring.py:exact", {"score": 10 ** 400})
