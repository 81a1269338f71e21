"""The daemon's progress lines (#16): one per stage start and end, and a summary, by content (not
timing). The daemon is the real one (serve, its slots, run_stage, the queue's retry policy) on
libvirt's test driver; only the stage body, which would boot a VM, is a stand-in whose verdicts
the test chooses. The CLI's own lines are checked too, with -q silencing them."""

from __future__ import annotations

import re
from pathlib import Path

from vmjudge.config import load_site
from vmjudge.errors import InfrastructureError
from vmjudge.queue import retry
from vmjudge.queue.db import Queue
from vmjudge.stages.context import StageOutcome
from vmjudge.supervisor import evaluate
from vmjudge.supervisor.daemon import serve
from vmjudge.supervisor.progress import Progress

from .cli import run_cli

TIME = r"\d\d:\d\d:\d\d"


class StandIn:
    """bob fails the quiz; carol's first prep meets a broken VM start (the infrastructure's); every
    other stage passes, and stage 4 scores."""

    def __init__(self):
        self.carol_failed = False

    def __call__(self, queue, site, entry, stage, run, slot, cancel):
        if entry.owner == "bob" and stage.name == "quiz":
            return StageOutcome("failed", "output does not match", reason="quiz-mismatch", manifest={})
        if entry.owner == "carol" and not self.carol_failed:
            self.carol_failed = True
            raise InfrastructureError("vm-start", "the VM would not start")
        if stage.name == "score":
            return StageOutcome("scored", "scored", scores={"score": 1.0}, manifest={})
        return StageOutcome("passed", "ok", manifest={})


def setup_queue(tmp_path: Path, monkeypatch) -> tuple:
    monkeypatch.setenv("VMJUDGE_URI", "test:///default")
    site = load_site(tmp_path)
    site.layout.ensure()
    queue = Queue(site.layout.queue_db)
    queue.add_challenge("beats", tmp_path, "key")
    ids = {o: queue.add_entry("beats", o, False, "0" * 64, "x-entry.zip", Path("/x"))
           for o in ("alice", "bob", "carol")}
    monkeypatch.setattr(evaluate, "_run", StandIn())
    monkeypatch.setattr(retry, "RETRY_DELAYS", (0.05, 0.05))
    return site, queue, ids


def test_a_line_per_stage_start_and_end_and_a_summary(tmp_path, monkeypatch):
    site, queue, ids = setup_queue(tmp_path, monkeypatch)
    lines: list[str] = []
    serve(site, queue, 1, until_idle=True, progress=Progress(queue, lines.append))
    assert all(re.match(TIME + " ", line) for line in lines)
    said = [line[9:] for line in lines]
    a, b, c = ids["alice"], ids["bob"], ids["carol"]
    for stage in ("prep", "quiz", "exam"):
        assert f"entry {a} (alice, beats) {stage}: started in slot 0" in said
        assert any(re.fullmatch(rf"entry {a} \(alice, beats\) {stage}: passed in slot 0 after \d+\.\d s", s)
                   for s in said)
    assert any(s.startswith(f"entry {a} (alice, beats) score: scored in slot 0 after ") for s in said)
    assert any(s.startswith(f"entry {b} (bob, beats) quiz: failed (quiz-mismatch) in slot 0 after ") for s in said)
    assert not any(f"entry {b} (bob, beats) exam" in s for s in said)
    assert any(s.startswith(f"entry {c} (carol, beats) prep: infrastructure failure (vm-start): it runs again "
                            "shortly in slot 0 after ") for s in said)
    assert sum(s.startswith(f"entry {c} (carol, beats) prep: started") for s in said) == 2
    starts, ends = [s for s in said if ": started in " in s], [s for s in said if " after " in s]
    assert len(starts) == len(ends) == 4 + 2 + 5  # alice 4 stages, bob 2, carol 4 and the retried prep
    assert said[-1] == f"3 entries ended (1 failed, 2 scored), {len(ends)} stages run, in " + \
        said[-1].rsplit(" in ", 1)[1]
    assert re.fullmatch(r"\d+ s", said[-1].rsplit(" in ", 1)[1])


def test_the_daemon_command_prints_them_on_stderr_and_q_silences_them(tmp_path):
    """The command line on an empty queue (libvirt's test driver): the summary alone, or nothing."""
    env = {"VMJUDGE_URI": "test:///default"}
    loud = run_cli("daemon", "--until-idle", home=tmp_path, env=env)
    assert loud.returncode == 0 and loud.stdout == ""
    assert re.fullmatch(TIME + r" 0 entries ended, 0 stages run, in \d+ s\n", loud.stderr)
    quiet = run_cli("daemon", "--until-idle", "-q", home=tmp_path, env=env)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""
