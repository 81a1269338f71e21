"""`vmjudge challenge new`, on the host: for each style and scorer, what it writes passes what
`challenge add` checks before it builds an image (challenge.toml, both record sets, the reference,
the scorer), its sample archive passes admission's checks and prep's unpacker, and its sample entry,
run here as the stages run it (next.sh per record, in a directory with the record's files),
reproduces its own training results and scores 1.0 with the challenge's own scorer. A wrong answer
must score less, so a scorer that read nothing could not pass.

`challenge add` itself (the image build) and the sample judged in real VMs are
test_challenge_new_vm.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vmjudge.archive.checks import check_archive
from vmjudge.archive.names import check_archive_name
from vmjudge.archive.unpack import unpack
from vmjudge.config import Challenge, check_challenge_data, load_challenge
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.loader import load_scorer
from vmjudge.stages.answers import parse_answer_lines

from .cli import run_cli
from .test_docs_reference import _page

CASES = [("answer-lines", "accuracy"), ("answer-lines", "af2017"), ("answer-lines", "heart2016"),
         ("answer-lines", "alarms2015"), ("files", "dice")]


def new_challenge(directory: Path, style: str, scorer: str | None = None) -> subprocess.CompletedProcess:
    args = ["challenge", "new", str(directory), "--style", style] + (["--scorer", scorer] if scorer else [])
    return run_cli(*args, home=directory.parent / "home")


def run_records(ch: Challenge, entry: Path, subset: str, work: Path) -> ExamResults:
    """next.sh RECORD for each record of `subset` in a copy of the entry with the record's files
    linked beside it, as the quiz and the exam do (answers.txt set aside first); the results as
    stage 3 gives them to the scorer."""
    shutil.copytree(entry, work)
    (work / "answers.txt").unlink(missing_ok=True)
    records = ch.training if subset == "training" else ch.test
    files: dict[str, bytes | None] = {}
    for record in records:
        sources = ch.record_files(subset, record)
        linked = [work / f.name for f in sources]
        for source, link in zip(sources, linked, strict=True):
            link.symlink_to(source)
        subprocess.run(["./next.sh", record], cwd=work, check=True, timeout=60, env={**os.environ, "HOME": str(work)})
        for link in linked:
            link.unlink()
        if ch.results.style == "files":
            out = work / ch.results.output_name(record)
            files[record] = out.read_bytes() if out.is_file() else None
    if ch.results.style == "files":
        return ExamResults(records=records, files=files)
    given = parse_answer_lines((work / "answers.txt").read_bytes())
    return ExamResults(records=records, answers={r: given.get(r) for r in records})


@pytest.mark.parametrize(("style", "scorer"), CASES)
def test_a_new_challenge_is_accepted_and_its_sample_entry_scores_one(tmp_path, style, scorer):
    directory = tmp_path / f"new-{scorer}"
    done = new_challenge(directory, style, scorer)
    assert done.returncode == 0, done.stderr
    assert f"wrote challenge new-{scorer} in {directory} (style {style}, scorer {scorer})" in done.stdout
    assert f"vmjudge challenge add {directory}" in done.stdout

    ch = load_challenge(directory)  # what `challenge add` checks before it builds the image
    check_challenge_data(ch)
    assert (ch.name, ch.results.style, ch.scorer) == (f"new-{scorer}", style, scorer)
    score = load_scorer(ch.scorer, ch.score_options)

    archive = directory / "entries" / "sample-entry.tar.gz"
    members = check_archive(ch, ch.name, archive)  # admission, as `submit` and the portal check it
    entry = tmp_path / "unpacked"
    unpack(archive, check_archive_name(archive.name), entry)  # prep's unpacker
    for required in ch.entry.required:
        assert (entry / required).exists(), f"the sample lacks {required}: {members}"

    quiz = run_records(ch, entry, "training", tmp_path / "quiz")
    if style == "files":
        for record in ch.training:
            assert quiz.files is not None and quiz.files[record] == (entry / ch.results.submitted_path(record)
                                                                      ).read_bytes(), record
    else:
        assert quiz.answers == parse_answer_lines((entry / "answers.txt").read_bytes())

    exam = run_records(ch, entry, "test", tmp_path / "exam")
    assert score(exam, ch.reference_dir)["score"] == 1.0

    first = ch.test[0]
    if style == "files":
        assert exam.files is not None
        worse = ExamResults(records=exam.records, files={**exam.files, first: None})
    else:
        assert exam.answers is not None
        others = {a for a in exam.answers.values() if a != exam.answers[first]}
        worse = ExamResults(records=exam.records, answers={**exam.answers, first: others.pop()})
    assert score(worse, ch.reference_dir)["score"] < 1.0


def test_the_defaults_are_answer_lines_scored_by_accuracy_and_files_by_dice(tmp_path):
    assert new_challenge(tmp_path / "lines", "answer-lines").returncode == 0
    assert new_challenge(tmp_path / "masks", "files").returncode == 0
    assert (load_challenge(tmp_path / "lines").scorer, load_challenge(tmp_path / "masks").scorer) == ("accuracy",
                                                                                                      "dice")


def test_the_same_challenge_is_written_byte_for_byte_each_time(tmp_path):
    for where in ("a", "b"):
        assert new_challenge(tmp_path / where / "same", "files").returncode == 0
    a, b = tmp_path / "a" / "same", tmp_path / "b" / "same"
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for path in files:
        assert (a / path).read_bytes() == (b / path).read_bytes(), path


def test_its_challenge_toml_names_every_key_of_the_reference(tmp_path):
    """Every challenge.toml key the reference lists (test_docs_reference.py holds the reference to
    the code) is in the written file, set or as a comment."""
    assert new_challenge(tmp_path / "keys", "answer-lines").returncode == 0
    written = (tmp_path / "keys" / "challenge.toml").read_text()
    for table, keys in _page()["challenge.toml"].items():
        for key in keys:
            assert f"\n{key} = " in written or f"# {key} = " in written, f"[{table}] {key}"


@pytest.mark.parametrize(("args", "said"), [
    (["--style", "files", "--scorer", "accuracy"], "--scorer accuracy has no sample data for style files: choose "
                                                   "dice"),
    (["--style", "answer-lines", "--scorer", "dice"], "--scorer dice has no sample data for style answer-lines"),
    (["--name", "no spaces"], "'no spaces' is not a challenge name"),
])
def test_what_it_refuses_is_one_sentence_and_writes_nothing(tmp_path, args, said):
    done = run_cli("challenge", "new", str(tmp_path / "refused"), *args, home=tmp_path / "home")
    assert done.returncode == 1 and done.stderr.startswith("vmjudge: ") and said in done.stderr, done.stderr
    assert not (tmp_path / "refused").exists()


def test_a_directory_that_holds_something_is_refused(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine\n")
    done = new_challenge(tmp_path / "full", "answer-lines")
    assert done.returncode == 1 and "exists and is not an empty directory" in done.stderr
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["notes.txt"]
