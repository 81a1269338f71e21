"""Stepped runs in real VMs (#60), DrivenData's airport-configuration way: examples/drivendata-stepped's
main.py runs once per prediction time, seeing only the steps so far. The `peek` entry checks that from
inside, at every step of the sample (its log, the participant's) and of the test set (the exam's log, the
organiser's): the CD and the disks are shut to it, the data shows no later hour, the overlay names no later
step, and the last step's submission.csv is gone. A step past its cap is counted and its rows score as
missing, as a record's would; the others are scored as the host computes them."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from vmjudge.config import load_challenge
from vmjudge.vm import domain

from .host_lock import linked_home
from .published import wait_until_published
from .replica_console import json_line
from .test_pipeline import EXAMPLES, vmjudge
from .test_replica import CHECK_TIMEOUT, daemon_stage_messages
from .test_submission_vm import Judged, booted_replica, submission_zip

EXAMPLE = EXAMPLES / "drivendata-stepped"
CASES = ("persistence", "peek", "slow-step")


def steps(subset: str) -> list[str]:
    return sorted(p.name for p in (EXAMPLE / subset / "steps").iterdir())


def persistence(subset: str, skip: tuple[int, ...] = ()) -> dict[str, str | None]:
    """What the benchmark predicts at each step, from the data up to it, computed here (None: a step skipped)."""
    predicted: dict[str, str | None] = {}
    latest: dict[str, str] = {}
    for k, step in enumerate(steps(subset)):
        for path in sorted((EXAMPLE / subset / "steps" / step / "configs").glob("*.csv")):
            with open(path, newline="") as f:
                latest.update({r["airport"]: r["config"] for r in csv.DictReader(f)})
        with open(EXAMPLE / subset / "steps" / step / "submission_format.csv", newline="") as f:
            for row in csv.DictReader(f):
                predicted[row["id"]] = None if k in skip else latest[row["id"].split("-", 1)[0]]
    return predicted


def accuracy(predicted: dict[str, str | None]) -> float:
    truth = dict(line.split(",") for line in (EXAMPLE / "reference" / "REFERENCE.csv").read_text().split())
    return sum(1 for i, c in truth.items() if predicted[i] == c) / len(truth)


def peeks(text: str) -> list[dict]:
    return [json.loads(line.split("peek: ", 1)[1]) for line in text.splitlines() if line.startswith("peek: ")]


@pytest.fixture(scope="module")
def judged(site, image, conn):
    home = linked_home(site.home, "stepped-")
    vmjudge(home, "challenge", "add", str(EXAMPLE))
    archives = home / "archives"
    archives.mkdir()
    ids = {case: int(vmjudge(home, "submit", "drivendata-stepped", str(submission_zip(
        EXAMPLE / "entries" / case, archives / f"{case}-submission.zip")), "--owner", case).stdout) for case in CASES}
    vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    wait_until_published(home)
    yield Judged(home, ids)
    assert domain.leftover_domains(conn) == []
    shutil.rmtree(home)


def test_each_step_is_run_and_the_joined_rows_score_what_the_host_computes(judged):
    test = load_challenge(EXAMPLE).test
    doc = judged("persistence")
    assert (doc["state"], doc["outcome"]) == ("done", "scored"), doc["report"]
    assert doc["exam"] == {"records": len(test), "completed": len(test), "failed": 0, "timed_out": 0}
    assert doc["scores"]["score"] == pytest.approx(accuracy(persistence("test")))
    assert 0.4 < doc["scores"]["score"] < 1.0  # the configurations change: the past is a fair guess, not the answer
    report = doc["report"]
    assert "The sample's 3 steps (12 rows): each step's submission.csv matches its format" in report
    for step in steps("training"):  # the sample's log, step by step, each given its time
        assert f"--- log of step {step} ---\npredicting for {step}" in report


def check_no_future(found: list[dict], subset: str, devices: tuple[str, ...] = ("/dev/sr0",)) -> None:
    names = steps(subset)
    assert [f["step"] for f in found] == names
    for k, f in enumerate(found):
        assert f["argv"] == [names[k]] and f["latest"] == names[k] and f["future_files"] == 0, f
        assert f["previous_submission"] is False, f  # the last step's output is not this one's
        assert f["data_entries"] == ["configs", "submission_format.csv"]
        for path in ("/media", "/media/cdrom", f"/media/cdrom/{subset}"):
            assert f["tries"][path] == "refused: Permission denied", (path, f)
        assert f["tries"]["/home/entry/data"] == []  # the data is at the code directory's data alone
        tried = {k: v for k, v in f["tries"].items() if k.startswith("/dev/")}
        assert set(devices) <= set(tried) and all(v.startswith("refused") for v in tried.values()), tried
        if k == 0:  # one step: its directory bound alone
            assert f["layers"] == []
            continue
        (layers,) = f["layers"]
        assert sorted(layers.split("lowerdir=")[1].split(",")[0].split(":")) == \
            sorted(f"steps/{n}" for n in names[:k + 1]), layers


def test_no_step_reads_a_later_one_checked_from_inside(judged):
    doc = judged("peek")
    assert (doc["state"], doc["outcome"]) == ("done", "scored"), doc["report"]
    check_no_future(peeks(doc["report"]), "training")  # the sample's, in the participant's log
    exam_log = vmjudge(judged.home, "logs", str(judged.ids["peek"]), "--stage", "exam").stdout
    check_no_future(peeks(exam_log), "test")  # the test set's, in the organiser's
    assert "2022-06-08" not in doc["report"]  # nothing of the test set's steps reaches the participant
    assert doc["scores"]["score"] == pytest.approx(accuracy(persistence("test")))  # it found nothing to cheat with


def test_a_step_past_its_cap_is_counted_and_its_rows_score_as_missing(judged):
    test = load_challenge(EXAMPLE).test
    doc = judged("slow-step")
    assert (doc["state"], doc["outcome"]) == ("done", "scored"), doc["report"]
    assert doc["exam"] == {"records": len(test), "completed": len(test) - 4, "failed": 0, "timed_out": 4}
    assert "6 test steps (24 rows): 5 completed, 0 failed or off the format, 1 timed out." in doc["report"]
    assert doc["scores"]["score"] == pytest.approx(accuracy(persistence("test", skip=(4,))))


def test_the_replicas_local_test_runs_the_steps_as_the_judge_did(judged):
    """`vmjudge-replica check` of a stepped submission: the judge's prep and quiz, step by step, the same
    messages for the benchmark; and in the replica too, no step reads a later one (its drive, the
    participant's, aside)."""
    home = judged.home
    with booted_replica(home, "drivendata-stepped") as console:
        output, status = console.run("vmjudge-replica check --json /media/vda1/persistence-submission.zip",
                                     CHECK_TIMEOUT)
        judge = daemon_stage_messages(home, judged.ids["persistence"])
        assert json_line(output)["stages"] == {k: v for k, v in judge.items() if k in ("prep", "quiz")}
        assert status == 0
        output, status = console.run("vmjudge-replica check --json /media/vda1/peek-submission.zip", CHECK_TIMEOUT)
        check_no_future(peeks(json_line(output)["stages"]["quiz"]), "training", devices=("/dev/sr0",))
        output, status = console.run("stat -c %a /media", 60)
        assert output.strip() == "755", output  # given back after the run
