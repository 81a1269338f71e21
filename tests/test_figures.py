"""Resource figures (#20): how the host takes them from the guest, how the queue keeps them
with each stage run (an older home gains the column), and who sees what of them: every
figure beside its limit for stage 1 and the quiz, tenths of the caps only for the exam, all of
it for organisers. The guest's measuring is tested with real VMs in test_sandbox_vm.py and the
exam's silence end to end in test_pipeline.py; here the figures are given."""

from __future__ import annotations

import json
import math

import pytest

from vmjudge.config import load_site
from vmjudge.reports.figures import participant_lines, participant_view, tenths
from vmjudge.reports.participant import AS_PUBLISHED
from vmjudge.reports.report import show, write_html
from vmjudge.stages.figures import stage_seconds
from vmjudge.vm.channel import FrameStream, Transcript
from vmjudge.vm.reading import JobRun

from .test_frames import stream_of
from .test_queue_hosts import add, hosts

MIB = 1 << 20


def row(name: str, seconds: float, cpu: float, peak: int, oom: int = 0, processes: int = 2) -> dict:
    return {"name": name, "status": "ok", "seconds": seconds, "cpu_seconds": cpu, "peak_memory": peak,
            "oom_kills": oom, "processes": processes}


def figures(rows: list[dict], command_limit: float, stage_seconds: float | None, stage_limit: float | None) -> dict:
    return {"commands": rows, "command_limit": command_limit, "stage_seconds": stage_seconds,
            "stage_limit": stage_limit, "memory_limit": 1800 * MIB, "vm_memory": 2048 * MIB,
            "home_used": 120 * MIB, "home_size": 1024 * MIB,
            "vm": {"wall_seconds": (stage_seconds or 0) + 20, "boot_seconds": 15.0, "cpu_seconds": 31.5, "vcpus": 2}}


PREP = figures([row("setup.sh", 41.234, 38.5, 700 * MIB, processes=12)], 300.0, 41.9, None)
QUIZ = figures([row(f"a10{i}", 2.0 + i, 1.5 + i, (100 + 50 * i) * MIB) for i in range(7)], 40.0, 80.123, 4100.0)
EXAM = figures([row("b201", 7.123, 7.0, 900 * MIB), row("b202", 1.456, 1.4, 300 * MIB, oom=1)], 40.0, 1234.567, 3600.0)


def test_the_guests_figures_are_kept_as_numbers_or_not_at_all():
    """The channel's guard is the guest's root: a figure that is not a finite, non-negative
    number is not kept, and unknown keys are dropped."""
    fs = FrameStream("n1")
    fs.feed(stream_of(("hello", {"nonce": "n1", "protocol": 1}), ("start", {"index": 0, "name": "a"}),
                      ("end", {"index": 0, "status": "ok", "exit_code": 0, "seconds": 1.5,
                               "usage": {"cpu_seconds": 1.25, "peak_memory": 1 << 30, "oom_kills": "many",
                                         "processes": float("nan"), "secret": 7}}),
                      ("start", {"index": 1, "name": "b"}),
                      ("end", {"index": 1, "status": "ok", "exit_code": 0, "usage": [1, 2]}),
                      ("start", {"index": 2, "name": "c"}),
                      ("end", {"index": 2, "status": "ok", "exit_code": 0,
                               "usage": {"cpu_seconds": -1, "peak_memory": True, "oom_kills": 1 << 70}}),
                      ("bye", {"commands": 3, "home_used": 5, "memory_max": 9})))
    first, second, third = fs.transcript.commands
    assert first.usage == {"cpu_seconds": 1.25, "peak_memory": 1 << 30, "oom_kills": None, "processes": None}
    assert second.usage is None
    assert third.usage == {"cpu_seconds": None, "peak_memory": None, "oom_kills": None, "processes": None}


def run_of(*timeline: tuple[int, str, float]) -> JobRun:
    return JobRun("vmj-test", Transcript("n1", timeline=list(timeline)), "0" * 64, boot_seconds=30.0,
                  total_seconds=60.0, ended="capped")


def test_a_stage_whose_guest_never_said_hello_took_an_unknown_time():
    """Measured from the hello: without one the time is unknown, and the report says so
    rather than "0/10 of the cap"."""
    assert stage_seconds(run_of((0, "hello", 100.0), (1, "start", 101.0), (2, "bye", 112.5))) == 12.5
    silent = stage_seconds(run_of())
    assert silent is None
    assert stage_seconds(run_of((3, "start", 101.0), (4, "bye", 112.5))) is None  # frames, but no hello
    [line] = participant_lines("exam", figures([], 60, silent, 600))
    assert "time unknown" in line and "/10 of the 10 min cap" not in line


@pytest.mark.parametrize("used, cap, said", [(0, 100, 0), (0.001, 100, 1), (10, 100, 1), (10.01, 100, 2),
                                             (99.99, 100, 10), (100, 100, 10), (250, 100, 10), (None, 100, None),
                                             (5, None, None)])
def test_tenths_round_up_and_stop_at_the_cap(used, cap, said):
    assert tenths(used, cap) == said


def test_the_exam_gives_two_tenths_and_nothing_per_record():
    view = participant_view("exam", EXAM)
    assert view == {"time_tenths": 4, "time_cap_seconds": 3600.0, "memory_tenths": 5, "memory_cap": 2048 * MIB}
    (line,) = participant_lines("exam", EXAM)
    assert line == ("Resources (the exam gives tenths of its caps only): time 4/10 of the 1 h cap; "
                    "peak memory 5/10 of the VM's 2.0 GiB.")


def test_the_quiz_gives_each_figure_beside_its_limit_and_the_five_slowest():
    view = participant_view("quiz", QUIZ)
    assert view["slowest"] == ["a106", "a105", "a104", "a103", "a102"]
    assert [r["record"] for r in view["records"]] == [f"a10{i}" for i in range(7)]
    assert view["records"][6] == {"record": "a106", "status": "ok", "seconds": 8.0, "cpu_seconds": 7.5,
                                  "peak_memory": 400 * MIB, "oom_kills": 0, "processes": 2}
    first, second = participant_lines("quiz", QUIZ)
    assert first == ("Resources: slowest training record a106: 8.0 s of 40.0 s; the quiz took 80.1 s of 4100.0 s; "
                     "peak memory 400.0 MiB of 1.8 GiB (a106); home disk 120.0 MiB of 1.0 GiB used.")
    assert second.startswith("Slowest records: a106 8.0 s (CPU 7.5 s, 400.0 MiB), a105 7.0 s ")
    assert second.count(" s (CPU ") == 5


def test_setup_gives_its_time_cpu_memory_processes_and_the_oom_killer():
    (line,) = participant_lines("prep", PREP)
    assert line == ("Resources: setup.sh 41.2 s of 300.0 s (CPU 38.5 s, at most 12 processes); peak memory "
                    "700.0 MiB of 1.8 GiB; home disk 120.0 MiB of 1.0 GiB used.")
    killed = figures([{**PREP["commands"][0], "oom_kills": 2}], 300.0, 41.9, None)
    assert "the out-of-memory killer ended 2 processes (setup.sh): the memory cap was reached" in \
        participant_lines("prep", killed)[0]


def judged_home(tmp_path, location):
    home = tmp_path / "home"
    home.mkdir()
    site = load_site(home)
    site.layout.ensure()
    (queue,) = hosts(location, tmp_path, "h")
    (tmp_path / "challenge.toml").write_text('name = "c"\n')
    eid = add(queue, tmp_path)
    for stage, figs, nxt in (("prep", PREP, "quiz"), ("quiz", QUIZ, "exam"), ("exam", EXAM, "score")):
        queue.claim_next()
        run = queue.start_stage(eid, stage, 0)
        queue.finish_stage(run, "passed", f"{stage} ok", {}, next_stage=nxt, figures=figs)
    queue.claim_next()
    queue.finish_stage(queue.start_stage(eid, "score", 0), "scored", "score 0.5", {}, outcome="scored",
                       scores={"score": 0.5})
    return site, queue, eid


def test_the_queue_keeps_the_figures_and_the_reports_split_them(queue_location, tmp_path):
    site, queue, eid = judged_home(tmp_path, queue_location)
    assert [r.figures for r in queue.stage_runs(eid)] == [PREP, QUIZ, EXAM, None]
    # The exam took 4/10 of its hour: participants see it 24 min after it started, not before.
    waiting = show(site, queue, eid)
    assert (waiting["state"], waiting["stage"], set(waiting["figures"])) == ("running", "exam", {"prep", "quiz"})
    participant = show(site, queue, eid, at=AS_PUBLISHED)
    assert set(participant["figures"]) == {"prep", "quiz", "exam"}
    assert participant["figures"]["exam"] == participant_view("exam", EXAM)
    text = json.dumps(participant) + write_html(queue, site, eid).read_text()
    for secret in ("b201", "b202", "7.123", "1234.567", "1234.6", str(900 * MIB), "31.5"):
        assert secret not in text
    assert "time 4/10 of the 1 h cap" in participant["report"]
    organiser = show(site, queue, eid, organiser=True)["organiser"]
    assert [a["figures"] for a in organiser["attempts"]] == [PREP, QUIZ, EXAM, None]
    assert any(line.startswith("  b201: ok 7.1 s of 40.0 s") for line in organiser["figures"])
    assert any("exam: 2 command(s) in 1234.6 s of 3600.0 s" in line for line in organiser["figures"])


def test_a_queue_made_before_the_figures_gains_their_column(queue_location, tmp_path):
    (queue,) = hosts(queue_location, tmp_path, "h")
    old = add(queue, tmp_path, owner="old")
    queue.finish_stage(queue.start_stage(queue.claim_next().id, "prep", 0), "passed", "ok", {}, next_stage="quiz")
    with queue.database.transaction() as db:
        db.execute("ALTER TABLE stage_runs DROP COLUMN figures")
    (queue,) = hosts(queue_location, tmp_path, "h")
    assert [(r.status, r.figures) for r in queue.stage_runs(old)] == [("passed", None)]
    eid = add(queue, tmp_path, owner="new")
    run = queue.start_stage(queue.claim_next(only=eid).id, "prep", 0)
    queue.finish_stage(run, "passed", "ok", {}, next_stage="quiz", figures=PREP)
    assert queue.stage_runs(eid)[0].figures == PREP
    assert math.isclose(queue.stage_runs(eid)[0].figures["stage_seconds"], 41.9)
