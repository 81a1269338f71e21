"""`vmjudge entries` and `vmjudge logs` (#16): the organiser's list of every entry, filtered and
paged, and one entry's logs, on a real queue with entries in every state (no VM: the states are
made through the queue's own transitions, as the daemon makes them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmjudge.config import load_site
from vmjudge.queue import db as db_module
from vmjudge.queue.db import Queue
from vmjudge.queue.listing import EntryFilter, find_entries

from .cli import run_cli


def add(queue: Queue, owner: str, challenge: str = "beats", late: bool = False) -> int:
    return queue.add_entry(challenge, owner, late, "0" * 64, f"{owner}-entry.zip", Path("/nonexistent"))


def claim(queue: Queue, entry_id: int, stage: str):
    return queue.start_stage(queue.claim_next(only=entry_id).id, stage, 0)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A queue with an entry in every state and outcome, submitted a day apart (ids 1-7)."""
    clock = [1_795_000_000.0]  # 2026-11-18T11:06:40Z
    monkeypatch.setattr(db_module.time, "time", lambda: clock[0])
    monkeypatch.setattr("vmjudge.queue.rows.time.time", lambda: clock[0])
    site = load_site(tmp_path)
    site.layout.ensure()
    queue = Queue(site.layout.queue_db)
    queue.add_challenge("beats", tmp_path, "key")
    queue.add_challenge("af", tmp_path, "key")
    ids = {}
    for owner, challenge, late in (("ann", "beats", False), ("bob", "beats", False), ("cat", "af", False),
                                   ("dan", "beats", True), ("eve", "af", False), ("fay", "beats", False),
                                   ("gus", "af", False)):
        ids[owner] = add(queue, owner, challenge, late)
        clock[0] += 86400
    # ann: scored; bob: failed at the quiz; cat: dry run; dan (late): scored; eve: parked; fay: running; gus: queued
    for who, score in (("ann", 0.75), ("dan", 0.5)):
        for stage, nxt in (("prep", "quiz"), ("quiz", "exam"), ("exam", "score")):
            queue.finish_stage(claim(queue, ids[who], stage), "passed", "ok", {}, next_stage=nxt,
                               exam={"records": 10, "completed": 9, "failed": 1, "timed_out": 0}
                               if stage == "exam" else None)
        queue.finish_stage(claim(queue, ids[who], "score"), "scored", "ok", {}, outcome="scored",
                           scores={"score": score})
    queue.finish_stage(claim(queue, ids["bob"], "prep"), "passed", "ok", {}, next_stage="quiz")
    queue.finish_stage(claim(queue, ids["bob"], "quiz"), "failed", "x", {}, reason="quiz-mismatch", outcome="failed")
    queue.finish_stage(claim(queue, ids["cat"], "prep"), "passed", "ok", {}, next_stage="quiz")
    queue.finish_stage(claim(queue, ids["cat"], "quiz"), "dry-run", "ok", {}, outcome="dry-run")
    for _ in range(3):
        clock[0] += 100
        queue.infra_failure(claim(queue, ids["eve"], "prep"), "vm-start", "the VM would not start", {})
    claim(queue, ids["fay"], "prep")
    return site.home, ids


def cli_json(home: Path, *args: str) -> dict:
    proc = run_cli("entries", *args, "--json", home=home)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_entry_newest_first_with_its_verdict_score_and_exam(home):
    home, ids = home
    listed = run_cli("entries", home=home)
    lines = listed.stdout.splitlines()
    assert listed.stderr == "`vmjudge reasons CODE` says what a reason means and what to do about it.\n"
    assert lines[0].split() == ["ID", "CHALLENGE", "OWNER", "SUBMITTED", "SCORE", "EXAM", "VERDICT"]
    rows = {int(line.split()[0]): line for line in lines[1:-1]}
    assert list(rows) == sorted(ids.values(), reverse=True)
    assert rows[ids["ann"]].split()[1:] == ["beats", "ann", "2026-11-18T11:06:40Z", "0.7500", "9/10", "(1", "failed)",
                                            "scored"]
    assert rows[ids["dan"]].split()[2:4] == ["dan", "(late)"]
    assert rows[ids["bob"]].endswith("failed at quiz: quiz-mismatch")
    assert rows[ids["cat"]].endswith("dry-run")
    assert rows[ids["eve"]].endswith("parked prep (vm-start)")
    assert rows[ids["fay"]].endswith("running prep")
    assert rows[ids["gus"]].endswith("queued prep")
    assert lines[-1] == "entries 1-7 of 7, newest first"


@pytest.mark.parametrize("args, owners", [
    (("beats",), {"ann", "bob", "dan", "fay"}),
    (("--state", "done"), {"ann", "bob", "cat", "dan"}),
    (("--state", "queued", "--state", "parked"), {"eve", "gus"}),
    (("--outcome", "failed"), {"bob"}),
    (("--outcome", "scored", "--official"), {"ann"}),
    (("--late",), {"dan"}),
    (("--owner", "eve"), {"eve"}),
    (("--since", "2026-11-22"), {"eve", "fay", "gus"}),
    (("--since", "2026-11-22T11:06:40Z"), {"eve", "fay", "gus"}),
    (("--since", "2026-11-22T11:06:41Z"), {"fay", "gus"}),
    (("--since", "2026-11-22T12"), {"fay", "gus"}),
    (("af", "--state", "done", "--outcome", "dry-run"), {"cat"}),
])
def test_filters_and_json(home, args, owners):
    home, ids = home
    doc = cli_json(home, *args)
    assert {e["owner"] for e in doc["entries"]} == owners and doc["total"] == len(owners)
    assert [e["id"] for e in doc["entries"]] == sorted((ids[o] for o in owners), reverse=True)


def test_the_json_entry_carries_what_a_script_needs(home):
    home, ids = home
    ann = next(e for e in cli_json(home)["entries"] if e["owner"] == "ann")
    assert ann == {"id": ids["ann"], "challenge": "beats", "owner": "ann", "late": False, "dry_run": False,
                   "submitted_at": "2026-11-18T11:06:40Z", "state": "done", "stage": None, "outcome": "scored",
                   "failed_stage": None, "reason": None, "scores": {"score": 0.75},
                   "exam": {"records": 10, "completed": 9, "failed": 1, "timed_out": 0},
                   "finished_at": ann["finished_at"]}


def test_pages_newest_first(home):
    home, ids = home
    newest = sorted(ids.values(), reverse=True)
    first = run_cli("entries", "--limit", "3", home=home).stdout.splitlines()
    assert [int(line.split()[0]) for line in first[1:-1]] == newest[:3]
    assert first[-1] == "entries 1-3 of 7, newest first; --page 2 for older ones"
    last = run_cli("entries", "--limit", "3", "--page", "3", home=home).stdout.splitlines()
    assert [int(line.split()[0]) for line in last[1:-1]] == newest[6:]
    assert last[-1] == "entries 7-7 of 7, newest first"
    doc = cli_json(home, "--limit", "3", "--page", "2")
    assert (doc["total"], doc["page"], [e["id"] for e in doc["entries"]]) == (7, 2, newest[3:6])


def test_a_page_costs_one_query_of_its_own_size(tmp_path):
    """Thousands of entries: the page is LIMITed in SQL, the total counted there."""
    queue = Queue(tmp_path / "queue.db")
    queue.add_challenge("c", tmp_path, "key")
    for i in range(3000):
        add(queue, f"o{i % 7}", "c")
    page = find_entries(queue.database, EntryFilter(owner="o3"), limit=25, offset=25)
    assert page.total == 3000 // 7 + (3000 % 7 > 3) and len(page.entries) == 25
    assert [e.id for e in page.entries] == sorted((i + 1 for i in range(3000) if i % 7 == 3), reverse=True)[25:50]


@pytest.mark.parametrize("args, says", [
    (("nosuch",), "no challenge named 'nosuch' is registered"),
    (("--since", "yesterday"), "--since 'yesterday' is not a time vmjudge reads: give a UTC date or time such as "
                               "2026-11-24 or 2026-11-24T10:00:00Z."),
    (("--state", "lost"), "Invalid value for '--state'"),
])
def test_bad_arguments_are_one_sentence(home, args, says):
    proc = run_cli("entries", *args, home=home[0])
    assert proc.returncode != 0 and says in proc.stderr and proc.stdout == ""


def test_an_owner_name_with_escapes_is_printed_escaped(tmp_path):
    queue = Queue(load_site(tmp_path).layout.queue_db)
    queue.add_challenge("c", tmp_path, "key")
    add(queue, "\x1b[2Jmallory\u202e", "c")
    out = run_cli("entries", home=tmp_path).stdout
    assert "\x1b" not in out and "\u202e" not in out and "\\x1b[2Jmallory\\u202e" in out


def test_logs_prints_each_stage_log_escaped_and_one_stage_on_request(home):
    home, ids = home
    site = load_site(home)
    files = site.layout.results_of(ids["bob"], make=True)
    files.stage_log("prep").write_bytes(b"=== setup.sh\nbuilding \xe2\x9c\x93\n--- setup.sh: ok\n")
    files.stage_log("quiz").write_bytes(b"=== next.sh A0001\n\x1b]0;pwned\x07" + b"x" * (3 << 20) + b"\n")
    out = run_cli("logs", str(ids["bob"]), home=home).stdout
    assert out.startswith("==> prep.log (43 bytes) <==\n=== setup.sh\nbuilding \u2713\n--- setup.sh: ok\n"
                          "==> quiz.log (")
    assert "\x1b" not in out and "\\x1b]0;pwned\\x07" in out and out.count("x" * 1000) >= 3000
    only = run_cli("logs", str(ids["bob"]), "--stage", "prep", home=home).stdout
    assert only == "==> prep.log (43 bytes) <==\n=== setup.sh\nbuilding \u2713\n--- setup.sh: ok\n"
    none = run_cli("logs", str(ids["bob"]), "--stage", "exam", home=home)
    assert none.returncode == 1 and "entry 2 has no exam log yet" in none.stderr
    unknown = run_cli("logs", "99", home=home)
    assert unknown.returncode == 1 and "there is no entry 99" in unknown.stderr
