"""VM-time budgets ([limits] vm_hours): what a stage run is charged, `submit` refusing once the
budget is spent (nothing stored), `vmjudge usage`, and the participant's view in tenths only.
Stages are taken through the queue's own API with a clock moved by hand; no VM is started."""

from __future__ import annotations

import json
import time
from pathlib import Path
from unittest import mock

import pytest

from vmjudge.cli.usage import exact, used_and_left
from vmjudge.config import Site, load_challenge, load_site
from vmjudge.queue import db as db_module
from vmjudge.queue.admit import Admitted, admit, budget_tenths
from vmjudge.queue.db import Queue
from vmjudge.reports.report import show

from .cli import run_cli
from .test_spool import make_tar


class Board:
    """A home with challenge "bud" ([limits] vm_hours = 0.01: 36 s) and a clock for the queue.
    Its queue is the home's SQLite file, or the PostgreSQL database `location` names (a URL, as
    the queue_location fixture gives), which the commands find through site.toml."""

    def __init__(self, tmp_path: Path, location: Path | str | None = None):
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.challenge = tmp_path / "bud"
        self.challenge.mkdir()
        (self.challenge / "challenge.toml").write_text('name = "bud"\n[limits]\nvm_hours = 0.01\n')
        if isinstance(location, str):
            (self.home / "site.toml").write_text(f'[queue]\nurl = "{location}"\n')
            self.queue = Queue(location)
        else:
            self.queue = Queue(self.home / "queue.db")
        self.queue.add_challenge("bud", self.challenge, "key")
        self.made = 0
        self.tmp = tmp_path
        # The board's clock starts two hours back: its entries' publish times (queue/publish.py,
        # a tenth of an exam's cap after it started) have come by the real time, at which the
        # tests read what owners used outside the clock, and are still inside the fair-share window.
        self.now = float(int(time.time())) - 2 * 3600

    def submit(self, owner: str = "alice", late: bool = False):
        self.made += 1
        archive = make_tar(self.tmp / f"e{self.made}-entry.tar.gz",
                           {"./setup.sh": b"true\n", "./next.sh": f"echo {self.made}\n".encode()})
        return run_cli("submit", "bud", str(archive), "--owner", owner, *(["--late"] if late else []), home=self.home)

    def clock(self):
        """The queue reads `now` as the time while this is entered."""
        return mock.patch.object(db_module.time, "time", lambda: self.now)

    def admit(self, owner: str = "alice", files: dict[str, bytes] | None = None) -> Admitted:
        """`submit`'s admission, in this process and on the board's clock: what it admitted,
        or the EntryError that refused it."""
        self.made += 1
        archive = make_tar(self.tmp / f"e{self.made}-entry.tar.gz", files or
                           {"./setup.sh": b"true\n", "./next.sh": f"echo {self.made}\n".encode()})
        site = load_site(self.home)
        site.layout.ensure()
        with self.clock():
            return admit(site, self.queue, "bud", load_challenge(self.challenge), archive, owner, False)

    def run(self, entry_id: int, stage: str, seconds: float, status: str = "passed", infra: bool = False) -> None:
        """One stage of the entry that takes `seconds`, ending with `status` (or an infrastructure failure)."""
        with self.clock():
            self.queue.claim_next(only=entry_id)
            run = self.queue.start_stage(entry_id, stage, 0)
            self.now += seconds
            if infra:
                self.queue.infra_failure(run, "vm-start", "x", {})
            elif status == "passed":
                self.queue.finish_stage(run, "passed", "ok", {}, next_stage={"prep": "quiz", "quiz": "exam",
                                                                              "exam": "score"}[stage])
            else:
                self.queue.finish_stage(run, status, "x", {}, outcome=status, reason="setup-error")
            self.now += 60  # past any retry delay


def test_vm_stages_are_charged_their_time_and_nothing_else_is(tmp_path):
    board = Board(tmp_path)
    eid = int(board.submit().stdout)
    board.run(eid, "prep", 5, infra=True)  # the judge's failure: not charged
    board.run(eid, "prep", 7)
    board.run(eid, "quiz", 3)
    board.run(eid, "exam", 11)
    board.run(eid, "score", 50, status="scored")  # on the host: no VM time
    assert [r.vm_seconds for r in board.queue.stage_runs(eid)] == [None, 7, 3, 11, None]
    with board.clock():  # the exam's time is charged as participants see it: from its publish time
        assert board.queue.owner_usage("bud", "alice", False).vm_seconds == 10
    board.now = board.queue.entry(eid).published
    with board.clock():
        assert board.queue.owner_usage("bud", "alice", False).vm_seconds == 21


def test_submit_is_refused_once_the_budget_is_spent_and_stores_nothing(tmp_path):
    board = Board(tmp_path)
    first = board.submit()
    assert first.returncode == 0 and "1/10 of the 0.01 h of VM time used by alice" not in first.stderr
    assert "0/10 of the 0.01 h of VM time used by alice" in first.stderr
    eid = int(first.stdout)
    board.run(eid, "prep", 30, status="failed")  # a failed entry's time counts too: its VMs ran
    second = board.submit()
    assert second.returncode == 0 and "9/10 of the 0.01 h of VM time used by alice" in second.stderr
    board.run(int(second.stdout), "prep", 6, status="failed")
    spooled = sorted(p.name for p in (board.home / "spool").glob("*/*"))
    refused = board.submit()
    assert refused.returncode == 1
    assert "alice has used the 0.01 h of VM time allowed for bud: no further entry can be evaluated" in refused.stderr
    assert sorted(p.name for p in (board.home / "spool").glob("*/*")) == spooled  # nothing stored
    assert len(board.queue.entries()) == 2
    assert board.submit(owner="bob").returncode == 0  # each owner and board has its own budget
    assert board.submit(late=True).returncode == 0


def test_a_dry_run_is_refused_too_once_the_budget_is_spent(tmp_path):
    """A dry run never counts against the entry limit, but it runs VMs (prep, quiz)."""
    board = Board(tmp_path)
    dry = {"./DRYRUN": b"", "./setup.sh": b"true\n", "./next.sh": b"echo\n"}
    eid = board.admit(files=dry).entry_id
    assert board.queue.entry(eid).dry_run
    board.run(eid, "prep", 36, status="failed")
    spooled = sorted(p.name for p in (board.home / "spool").glob("*/*"))
    archive = make_tar(tmp_path / "again-entry.tar.gz", dry)
    refused = run_cli("submit", "bud", str(archive), "--owner", "alice", home=board.home)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == ("vmjudge: alice has used the 0.01 h of VM time allowed for bud: no further entry can be "
                              "evaluated (time the judge's own failures took is never charged).\n")
    assert sorted(p.name for p in (board.home / "spool").glob("*/*")) == spooled  # nothing stored
    assert [e.id for e in board.queue.entries()] == [eid]


def test_a_running_entry_is_never_cut_short_by_the_budget(tmp_path):
    board = Board(tmp_path)
    eid = int(board.submit().stdout)
    board.run(eid, "prep", 100)  # far beyond the 36 s budget: the entry goes on
    board.run(eid, "quiz", 100)
    assert board.queue.claim_next(only=eid).stage == "exam"


def test_usage_lists_each_owner_exactly_for_the_organiser(tmp_path):
    board = Board(tmp_path)
    a = int(board.submit().stdout)
    board.run(a, "prep", 18)
    int(board.submit(owner="bob").stdout)
    doc = json.loads(run_cli("usage", "bud", "--json", home=board.home).stdout)
    assert doc == {"challenge": "bud", "vm_hours": 0.01, "owners": [
        {"owner": "alice", "late": False, "entries": 1, "scored": 0, "vm_hours_used": 0.005, "vm_hours_left": 0.005,
         "organiser_vm_hours": 0.0},
        {"owner": "bob", "late": False, "entries": 1, "scored": 0, "vm_hours_used": 0.0, "vm_hours_left": 0.01,
         "organiser_vm_hours": 0.0}]}
    text = run_cli("usage", "bud", "--owner", "alice", home=board.home).stdout
    assert text == "alice: 1 entries, 0 scored, 0.01 h (18 s) of VM time used, 0.01 h (18 s) left of 0.01 h\n"


def test_the_participant_sees_the_budget_in_tenths_only(tmp_path):
    """The exam's run time is in the budget: exact figures would carry test labels out."""
    board = Board(tmp_path)
    eid = int(board.submit().stdout)
    board.run(eid, "prep", 4)
    board.run(eid, "quiz", 3)
    board.run(eid, "exam", 2.345)
    board.run(eid, "score", 0, status="scored")
    with board.clock():  # while being examined, the exam's time is not yet charged (7 s of 36)
        assert show(Site(home=board.home), board.queue, eid)["budget"] == {"vm_hours": 0.01, "used": "2/10"}
    board.now = board.queue.entry(eid).published
    with board.clock():
        doc = show(Site(home=board.home), board.queue, eid)
    assert doc["budget"] == {"vm_hours": 0.01, "used": "3/10"}
    assert "VM time on this board: 3/10 of the 0.01 h budget used by alice." in doc["report"]
    assert "9.345" not in json.dumps(doc) and "2.345" not in json.dumps(doc)


@pytest.mark.parametrize("used, budget, said", [(0, 3600, "0/10"), (1, 3600, "1/10"), (360, 3600, "1/10"),
                                                (361, 3600, "2/10"), (3600, 3600, "10/10"), (9999, 3600, "10/10")])
def test_tenths_round_up(used, budget, said):
    assert budget_tenths(used, budget) == said


def test_a_budget_out_of_range_is_refused(tmp_path):
    (tmp_path / "challenge.toml").write_text('name = "x"\n[limits]\nvm_hours = -1\n')
    from vmjudge.config import load_challenge
    from vmjudge.errors import ConfigError
    with pytest.raises(ConfigError, match=r"vm_hours.*hours from 0 to 100000, or leave the key out"):
        load_challenge(tmp_path)


@pytest.mark.parametrize("used, said", [(0, (0, 36)), (35.4, (35, 1)), (35.99, (35, 1)), (36, (36, 0)),
                                        (50.5, (50, 0))])
def test_usage_rounds_time_used_down_and_left_up_so_none_left_means_refused(used, said):
    assert used_and_left(used, 0.01) == said
    assert used_and_left(used, None) == (said[0], None)


def test_usage_gives_hours_to_read_and_the_seconds_exactly():
    assert exact(4500) == "1.25 h (4500 s)" and exact(0) == "0.00 h (0 s)" and exact(36001) == "10.00 h (36001 s)"
