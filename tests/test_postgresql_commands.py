"""The organiser's commands on a PostgreSQL queue, as on SQLite: a home whose site.toml names
a throw-away server, af2017 entries judged through the queue (stage 4 for real, from results
that travel in the database), then `status`, `entries`, `show`, `leaderboard`, `usage`, `gc`
and `rescore` as commands (no VM: Home.vmjudge runs each with libvirt unreachable, NO_VM_ENV).
A scored entry's results are fetched by a second host that never had them, and scored there
again to the same number. The exam's results reach the database the daemon's way only
(evaluate.conclude, which shares them before recording the result): nothing here puts them in
by hand, so a daemon that stopped sharing them would leave the second host nothing to score."""

from __future__ import annotations

import json
import random

import pytest

from vmjudge.config import load_site
from vmjudge.queue.db import Queue
from vmjudge.queue.results import ExamResults

from .test_rescore import AF2017, LABELS, RECORDS, Home, f1_mean, judge_from_archive, judge_results


def postgres_home(root, url: str, host: str) -> Home:
    root.mkdir()
    (root / "site.toml").write_text(f'[queue]\nurl = "{url}"\nhost = "{host}"\n')
    site = load_site(root)
    site.layout.ensure()
    return Home(site, Queue(url, host=host), {})


def test_the_organisers_commands_on_postgresql(tmp_path, pg_url):
    home = postgres_home(tmp_path / "a", pg_url, "a")
    home.queue.add_challenge("af2017", AF2017, "key")
    for i in range(6):
        rng = random.Random(i)
        answers = {r: rng.choice(["N", "A", "O", "~"]) for r in RECORDS}
        judge_from_archive(home, f"team{i % 3}", i == 5, answers)
    status = json.loads(home.vmjudge("status", "--json").stdout)
    assert status["done"] == 6 and status["active"] == []
    listed = json.loads(home.vmjudge("entries", "af2017", "--official", "--json").stdout)
    assert listed["total"] == 5
    for entry_id, answers in home.answers.items():
        assert home.show(entry_id)["scores"]["score"] == pytest.approx(f1_mean(answers, LABELS))
    board = json.loads(home.vmjudge("leaderboard", "af2017", "--json", "--organiser").stdout)
    best: dict[str, float] = {}  # each owner's best official score, as this test computes it
    for entry_id, answers in home.answers.items():
        if not home.queue.entry(entry_id).late:
            owner = home.queue.entry(entry_id).owner
            best[owner] = max(best.get(owner, 0.0), f1_mean(answers, LABELS))
    assert len(set(best.values())) == 3  # no tie, so the order is the scores' alone
    assert [row["owner"] for row in board] == sorted(best, key=lambda o: -best[o])
    assert all(row["exam_host"] == "a" for row in board)
    usage = json.loads(home.vmjudge("usage", "af2017", "--json").stdout)
    assert sorted((o["owner"], o["late"], o["entries"]) for o in usage["owners"]) == \
        [("team0", False, 2), ("team1", False, 2), ("team2", False, 1), ("team2", True, 1)]
    # gc: console logs kept 0 days, and one entry has one; --dry-run lists it and leaves it, gc removes it.
    with open(home.site.home / "site.toml", "a") as toml:
        toml.write("[retention]\nconsole_log_days = 0\n")
    first = min(home.answers)
    log = home.site.layout.results_of(first).directory / "console-exam.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"guest said hello\n")
    gone = [(first, "console_log", "console-exam.log")]
    listed = json.loads(home.vmjudge("gc", "--dry-run", "--json").stdout)
    assert [(r["entry_id"], r["kind"], r["name"]) for r in listed["removed"]] == gone and log.exists()
    removed = json.loads(home.vmjudge("gc", "--json").stdout)
    assert [(r["entry_id"], r["kind"], r["name"]) for r in removed["removed"]] == gone and not log.exists()
    doc = json.loads(home.vmjudge("rescore", "af2017", "--json").stdout)
    assert doc["ok"] and doc["done"] == 5

    # Host b shares the queue but not the files: stage 3's results come from the database,
    # where host a's daemon path put them.
    other = postgres_home(tmp_path / "b", pg_url, "b")
    doc = json.loads(other.vmjudge("rescore", "af2017", "--json").stdout)
    assert doc["ok"] and doc["done"] == 5
    for entry in doc["entries"]:
        assert entry["new"]["score"] == pytest.approx(f1_mean(home.answers[entry["entry_id"]], LABELS))
    assert sorted(p.name for p in other.site.layout.results_store.iterdir()) == \
        sorted({home.queue.exam_results(e).sha256 for e in home.answers if not home.queue.entry(e).late})


def test_stage_4_runs_on_a_host_that_did_not_run_stage_3(tmp_path, pg_url):
    """Host a concludes an entry's exam as its daemon does after the VM (evaluate.conclude);
    host b, which never had the results, claims stage 4 and scores it from the queue's database."""
    a, b = postgres_home(tmp_path / "a", pg_url, "a"), postgres_home(tmp_path / "b", pg_url, "b")
    a.queue.add_challenge("af2017", AF2017, "key")
    b.queue.add_copy("af2017", AF2017)
    answers = {r: ("N" if i % 2 else "A") for i, r in enumerate(RECORDS)}
    entry_id = judge_results(a, "af2017", "ann", ExamResults(records=RECORDS, answers=answers), scored_on=b)
    entry, runs = a.queue.entry(entry_id), a.queue.stage_runs(entry_id)
    assert [(r.stage, r.host, r.status, r.reason) for r in runs if r.stage in ("exam", "score")] == [
        ("exam", "a", "passed", None), ("score", "b", "scored", None)]  # unshared: b fails it as setup-problem
    assert (entry.outcome, entry.scores["score"]) == ("scored", pytest.approx(f1_mean(answers, LABELS)))
    digest = a.queue.exam_results(entry_id).sha256
    assert [p.name for p in b.site.layout.results_store.iterdir()] == [digest]  # fetched by b, checked
    assert (b.site.layout.results_store / digest).read_bytes() == (a.site.layout.results_store / digest).read_bytes()
