"""Stepped submission runs on the host (#60, DrivenData's airport-configuration runtime): a set laid out
in steps and what `challenge add` refuses of one; the job the guest is given (a command per step, its
time its last argument, the steps so far its data, latest first); the rows of a step that failed kept
as missing and scored so; and the agent's own check of a stepped job."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from vmjudge.config import check_challenge_data, load_challenge
from vmjudge.errors import ConfigError, ScoringError
from vmjudge.queue.results import decode, encode
from vmjudge.scorers.builtin import accuracy, youth_mental_health
from vmjudge.stages.submission import _Judging, set_parts, submission_runs
from vmjudge.vm.channel import CommandResult, FileResult
from vmjudge.vm.job import CodeDir, Command, Job

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE = EXAMPLES / "drivendata-stepped"
GUEST = Path(__file__).resolve().parent.parent / "vmjudge" / "images" / "guest"


def stepped(tmp_path: Path, steps: dict[str, dict[str, tuple[str, ...]]]) -> Path:
    """A stepped challenge: set -> step -> its format's ids."""
    (tmp_path / "challenge.toml").write_text('name = "x"\n[entry]\nkind = "submission"\n[submission]\nsteps = true\n')
    for subset, by_step in steps.items():
        for step, ids in by_step.items():
            where = tmp_path / subset / "steps" / step
            where.mkdir(parents=True)
            (where / "submission_format.csv").write_text("id,p\n" + "".join(f"{i},0\n" for i in ids))
            (where / "seen.csv").write_text(f"{step}\n")
    (tmp_path / "reference").mkdir()
    return tmp_path


def test_a_stepped_sets_records_are_its_steps_ids_in_the_steps_order(tmp_path):
    ch = load_challenge(stepped(tmp_path, {"training": {"b": ("s3",), "a": ("s1", "s2")},
                                           "test": {"02": ("t2",), "01": ("t1",), "10": ("t3", "t4")}}))
    assert ch.submission is not None and ch.submission.steps
    assert (ch.training, ch.test) == (("s1", "s2", "s3"), ("t1", "t2", "t3", "t4"))
    check_challenge_data(ch)
    example = load_challenge(EXAMPLE)
    check_challenge_data(example)
    assert len(example.test) == 24 and example.test[0] == "katl-2022-06-08T10"


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: (d / "test" / "loose.csv").write_text("x\n"), "move loose.csv into the step that reveals it"),
    (lambda d: (d / "test" / "steps" / "03").write_text("x\n"), "is not a step"),
    (lambda d: (d / "test" / "steps" / ".hidden").mkdir(), "is not a step"),
    (lambda d: shutil.rmtree(d / "test" / "steps"), "it must hold only steps/"),
    (lambda d: [shutil.rmtree(p) for p in (d / "test" / "steps").iterdir()], "holds no step"),
    (lambda d: (d / "test" / "steps" / "02" / "submission_format.csv").write_text("id,p\nt1,0\n"),
     "repeats the id 't1' of step 01"),
    (lambda d: [(d / "test" / "steps" / f"{n:03d}").mkdir() for n in range(501)], "at most 500"),
])
def test_a_stepped_set_laid_out_wrongly_is_refused_naming_what_to_do(tmp_path, change, said):
    directory = stepped(tmp_path, {"training": {"a": ("s1",)}, "test": {"01": ("t1",), "02": ("t2",)}})
    change(directory)
    with pytest.raises(ConfigError, match=said):
        check_challenge_data(load_challenge(directory))


def test_a_step_without_its_format_is_refused_at_challenge_add(tmp_path):
    directory = stepped(tmp_path, {"training": {"a": ("s1",)}, "test": {"01": ("t1",), "02": ("t2",)}})
    (directory / "test" / "steps" / "02" / "submission_format.csv").unlink()
    with pytest.raises(ConfigError, match=r"steps/02/submission_format.csv is missing"):
        check_challenge_data(load_challenge(directory))


def test_each_step_is_a_command_with_its_time_last_and_the_steps_so_far_latest_first(tmp_path):
    ch = load_challenge(stepped(tmp_path, {"training": {"a": ("s1",)},
                                           "test": {"01": ("t1",), "02": ("t2", "t3"), "03": ("t4",)}}))
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "main.py").write_text("")
    runs = submission_runs(SimpleNamespace(challenge=ch, entry_dir=entry), "test", 300.0)
    commands = runs.job.commands
    assert [c.argv for c in commands] == [("python3", "main.py", s) for s in ("01", "02", "03")]
    assert [c.steps for c in commands] == [("steps/01",), ("steps/02", "steps/01"),
                                           ("steps/03", "steps/02", "steps/01")]
    assert [c.timeout for c in commands] == [ch.limits.per_record] * 3 and runs.command_limit == ch.limits.per_record
    assert runs.covers == (("t1",), ("t2", "t3"), ("t4",)) and runs.names == ("01", "02", "03")
    assert not runs.job.stop_on_failure  # a step that fails is counted, as a record is, and the next one runs
    doc = json.loads(runs.job.job_json("n", data_disks=True))
    assert doc["code"] == {"path": "/code_execution", "data": "data", "from": "test", "stepped": True}
    assert [(c["steps"], c["collect"], c["cwd"]) for c in doc["commands"]][1] == \
        (["steps/02", "steps/01"], ["submission.csv"], "/code_execution")
    assert "test/steps/03/seen.csv" in runs.job.media  # the whole set on its data disk; the guest shows each step


def test_a_stepped_job_is_all_steps_and_a_step_is_a_path_in_the_set():
    code = CodeDir("/code_execution", "data", "test", stepped=True)
    with pytest.raises(ValueError, match="each have their steps"):
        Job(commands=(Command("x", ("x",), 1),), code=code)
    with pytest.raises(ValueError, match="each have their steps"):
        Job(commands=(Command("x", ("x",), 1, steps=("steps/a",)),), code=CodeDir("/c", "data", "test"))
    for bad in ("../x", "/abs", "steps/../x", "a:b", "a,b", ""):
        with pytest.raises(ValueError, match="relative path of plain names"):
            Command("x", ("x",), 1, steps=(bad,))


def test_the_agent_refuses_a_step_that_is_not_a_path_in_the_stepped_set():
    """The guest's own check of job.json (the host builds it; a damaged CD must be refused, not half-run)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import code_dir; from system import JobError\n"
            "job = json.loads(sys.argv[2])\n"
            "for i, cmd in enumerate(job['commands']):\n"
            "    try:\n        code_dir.check_steps(job, i, cmd); print('ok')\n"
            "    except JobError as exc:\n        print('refused', exc)\n")
    good = {"argv": ["x"], "cwd": "/c", "steps": ["steps/b", "steps/a"], "collect": ["submission.csv"]}
    job = {"code": {"path": "/c", "data": "data", "from": "test", "stepped": True},
           "commands": [good, {**good, "steps": ["../../etc"]}, {**good, "steps": []},
                        {**good, "collect": ["../x"]}, {**good, "cwd": "/elsewhere"}]}
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(GUEST), json.dumps(job)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == "ok" and all(line.startswith("refused") for line in out[1:]), out


def test_a_failed_steps_rows_are_kept_as_missing_and_score_so(tmp_path):
    rows = {"a": {"config": "N"}, "b": None, "c": {"config": "S"}}
    back = decode(encode(("a", "b", "c"), {"a": "ok", "b": "timeout", "c": "ok"}, "table", rows=rows))
    assert back.rows == rows
    (tmp_path / "REFERENCE.csv").write_text("a,N\nb,N\nc,W\n")
    assert accuracy.score(back, tmp_path) == {"correct": 1.0, "records": 3.0, "score": pytest.approx(1 / 3)}
    wide = decode(encode(("a",), {"a": "ok"}, "table", rows={"a": {"config": "N", "other": "x"}}))
    with pytest.raises(ScoringError, match="reads one label per id, but the submission format has 2 columns"):
        accuracy.score(wide, tmp_path)


def test_youth_mental_health_scores_a_missing_row_as_wrong_in_every_variable():
    reference = EXAMPLES / "drivendata-style" / "reference"
    labels = [line.split(",") for line in (reference / "test_labels.csv").read_text().splitlines()]
    columns, ids = labels[0][1:], [row[0] for row in labels[1:]]
    truth = {row[0]: dict(zip(columns, row[1:], strict=True)) for row in labels[1:]}
    whole = youth_mental_health.score(decode(encode(ids, dict.fromkeys(ids, "ok"), "table", rows=truth)), reference)
    assert whole["score"] == pytest.approx(1.0)
    gone = {**truth, ids[0]: None}
    missing = youth_mental_health.score(decode(encode(ids, {**dict.fromkeys(ids, "ok"), ids[0]: "error"}, "table",
                                                      rows=gone)), reference)
    guessed_zero = {**truth, ids[0]: dict.fromkeys(columns, "0")}  # no positive, and no category, either
    zero = youth_mental_health.score(decode(encode(ids, dict.fromkeys(ids, "ok"), "table", rows=guessed_zero)),
                                     reference)
    assert missing["score"] == pytest.approx(zero["score"]) and missing["score"] < 1.0


def test_generate_reproduces_the_committed_stepped_data(tmp_path):
    subprocess.run([sys.executable, str(EXAMPLE / "generate.py"), "--out", str(tmp_path)], check=True)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(EXAMPLE) for s in ("public", "reference", "test", "training")
                       for p in (EXAMPLE / s).rglob("*") if p.is_file())
    assert made == committed
    for rel in made:
        assert (tmp_path / rel).read_bytes() == (EXAMPLE / rel).read_bytes(), rel
    assert os.listdir(EXAMPLE / "entries") and all((EXAMPLE / "entries" / e / "main.py").is_file()
                                                  for e in os.listdir(EXAMPLE / "entries"))


def test_a_stepped_quiz_shows_the_steps_logs_up_to_its_limit():
    ch = load_challenge(EXAMPLE)
    judging = _Judging(ch, (), silent=False, log_limit=100)
    for i in range(5):
        judging.log(CommandResult(index=i, name=f"step {i}", status="ok", output=bytearray(b"x" * 40)))
    shown = judging.shown()
    assert shown.count("--- log of step") == 1 and shown.endswith("--- the logs of 4 more steps are not shown ---")


def ended(index: int, name: str, data: bytes | None, output: bytes = b"ran\n") -> CommandResult:
    files = {"submission.csv": FileResult("submission.csv", None if data is None else len(data), data or b"")}
    return CommandResult(index=index, name=name, status="ok", exit_code=0, output=bytearray(output), files=files)


def test_the_quiz_stops_at_its_first_failed_step_and_shows_that_steps_log_whatever_the_limit(tmp_path):
    ch = load_challenge(stepped(tmp_path, {"training": {"a": ("s1",), "b": ("s2",), "c": ("s3",)},
                                           "test": {"01": ("t1",)}}))
    judging = _Judging(ch, set_parts(ch, "training"), silent=False, log_limit=10)
    assert judging.on_end(ended(0, "step a", b"id,p\ns1,0\n", b"x" * 50)) is False  # passed: on to the next
    assert judging.on_end(ended(1, "step b", b"id,p\nzz,0\n", b"Traceback: the failing step's")) is True
    assert judging.found[1].reason == "quiz-format" and judging.found[1].checked is None  # the quiz keeps no rows
    assert "Traceback: the failing step's" in judging.shown()  # past the 10-character limit: the failed step's
    exam = _Judging(ch, set_parts(ch, "test"), silent=True, log_limit=10)
    assert exam.on_end(ended(0, "step 01", b"id,p\nzz,0\n")) is False  # the exam runs every step


def test_the_exams_rows_are_held_within_a_budget_of_the_formats_sizes(tmp_path):
    ch = load_challenge(stepped(tmp_path, {"training": {"a": ("s1",)},
                                           "test": {f"{n:02d}": (f"t{n}",) for n in range(3)}}))
    exam = _Judging(ch, set_parts(ch, "test"), silent=True, log_limit=10)
    assert exam.budget == 16 << 20  # four times the formats' bytes, and at least 16 MiB
    wide = b"id,p\n" + b"t0," + b"9" * 18 + b"\n"
    assert exam.on_end(ended(0, "step 00", wide)) is False and exam.found[0].reason is None
    exam.budget = exam.kept + 10  # as if the steps so far had filled it
    exam.on_end(ended(1, "step 01", b"id,p\nt1," + b"1" * 18 + b"\n"))
    assert exam.found[1].reason == "exam-output" and "bytes the judge keeps" in exam.found[1].said
