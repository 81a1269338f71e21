"""Reports and the leaderboard, from a real queue database (no VMs)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from vmjudge.config import Site
from vmjudge.queue import db as db_module
from vmjudge.queue.db import Queue
from vmjudge.reports import report
from vmjudge.reports.leaderboard import leaderboard
from vmjudge.reports.report import LOG_EXCERPT_BYTES, log_excerpt, show, write_html


@pytest.fixture
def queue(tmp_path):
    q = Queue(tmp_path / "queue.db")
    q.add_challenge("c", tmp_path, "key")
    return q


def scored(queue, owner, score, late=False):
    eid = queue.add_entry("c", owner, late, "cd" * 32, "e-entry.zip", Path("/x"))
    entry = queue.claim_next(only=eid)
    run = queue.start_stage(entry.id, "score", 0)
    queue.finish_stage(run, "scored", f"Scores: score {score}", {}, outcome="scored", scores={"score": score})
    return eid


def test_best_entry_per_owner_ties_go_to_the_earlier(queue):
    a1 = scored(queue, "alice", 0.8)
    b1 = scored(queue, "bob", 0.9)
    scored(queue, "alice", 0.7)
    c1 = scored(queue, "carol", 0.8)
    rows = leaderboard(queue, "c")
    assert [(r.rank, r.owner, r.entry_id) for r in rows] == [(1, "bob", b1), (2, "alice", a1), (3, "carol", c1)]


def test_late_entries_have_a_board_of_their_own(queue):
    scored(queue, "alice", 0.5)
    late = scored(queue, "dave", 0.99, late=True)
    assert [r.owner for r in leaderboard(queue, "c")] == ["alice"]
    assert [(r.owner, r.entry_id) for r in leaderboard(queue, "c", late=True)] == [("dave", late)]


def test_unscored_entries_are_not_ranked(queue):
    eid = queue.add_entry("c", "erin", False, "ef" * 32, "e-entry.zip", Path("/x"))
    run = queue.start_stage(queue.claim_next().id, "prep", 0)
    queue.finish_stage(run, "failed", "Missing component(s): next.sh.", {}, reason="missing-component",
                       outcome="failed")
    assert leaderboard(queue, "c") == []
    doc = show(Site(home=queue.database.path.parent), queue, eid)
    assert (doc["outcome"], doc["failed_stage"], doc["reason"]) == ("failed", "prep", "missing-component")
    assert "Missing component(s): next.sh." in doc["report"]


def test_report_shows_the_counted_attempt_and_hides_infrastructure_retries(queue, monkeypatch):
    eid = queue.add_entry("c", "frank", False, "ab" * 32, "e-entry.zip", Path("/x"))
    queue.claim_next()
    first = queue.start_stage(eid, "prep", 0)
    queue.infra_failure(first, "channel-broken", "the data channel broke: frame 3 failed its CRC check", {})
    later = time.time() + 10  # the retry's delay has passed
    monkeypatch.setattr(db_module.time, "time", lambda: later)
    queue.claim_next()
    second = queue.start_stage(eid, "prep", 1)
    queue.finish_stage(second, "passed", "setup.sh completed.", {"attempt": 2}, next_stage="quiz")
    site = Site(home=queue.database.path.parent)
    doc = show(site, queue, eid)
    assert "setup.sh completed." in doc["report"] and "CRC" not in doc["report"]
    assert (doc["state"], doc["stage"], doc["reason"]) == ("queued", "quiz", None)
    attempts = show(site, queue, eid, organiser=True)["organiser"]["attempts"]
    assert [(a["attempt"], a["status"], a["reason"]) for a in attempts] == [(1, "infra", "channel-broken"),
                                                                             (2, "passed", None)]


def test_the_organisers_report_quotes_each_stage_log_by_its_head_and_tail(queue):
    """A stage log may hold 64 MiB of what an entry printed: `show --organiser` quotes a bounded
    head and tail of it and says where the whole log is, so the command's memory and output stay
    small whatever the entry printed."""
    eid = queue.add_entry("c", "grace", False, "ef" * 32, "e-entry.zip", Path("/x"))
    site = Site(home=queue.database.path.parent)
    results = site.home / "results" / str(eid)
    results.mkdir(parents=True)
    big = b"HEAD-MARK\n" + b"\xff" * (4 << 20) + b"\nTAIL-MARK\n"
    (results / "exam.log").write_bytes(big)
    (results / "prep.log").write_text("--- setup.sh: ok\n")
    logs = show(site, queue, eid, organiser=True)["organiser"]["logs"]
    assert logs["prep.log"] == {"path": str(results / "prep.log"), "bytes": 17, "text": "--- setup.sh: ok\n"}
    exam = logs["exam.log"]
    assert exam["bytes"] == len(big) and exam["path"] == str(results / "exam.log")
    assert exam["text"].startswith("HEAD-MARK\n") and exam["text"].endswith("\nTAIL-MARK\n")
    assert f"[... {len(big) - 2 * LOG_EXCERPT_BYTES} bytes left out here; the whole log is {results / 'exam.log'}" \
        in exam["text"]
    assert len(exam["text"]) < 2 * LOG_EXCERPT_BYTES + 500


def test_the_html_report_shows_control_and_bidi_characters_as_escapes(queue):
    """setup.sh's output reaches the report: U+202E would reorder the page as a browser shows it."""
    eid = queue.add_entry("c", "heidi", False, "01" * 32, "e-entry.zip", Path("/x"))
    queue.claim_next()
    run = queue.start_stage(eid, "prep", 0)
    queue.finish_stage(run, "passed", "setup.sh completed.\n--- setup.sh output ---\nscore \u202e0.1\x1b[2J<b>",
                       {}, next_stage="quiz")
    page = write_html(queue, Site(home=queue.database.path.parent), eid).read_text()
    assert "score \\u202e0.1\\x1b[2J&lt;b&gt;" in page
    assert "\u202e" not in page and "\x1b" not in page


def test_a_log_cut_short_while_it_is_quoted_gives_what_is_left(tmp_path, monkeypatch):
    """A retry starts its stage log afresh: between reading the size and the tail, the file may shrink."""
    log = tmp_path / "quiz.log"
    log.write_bytes(b"a" * (200 << 10))
    real = os.fstat

    def shrinking(fd):
        result = real(fd)
        os.truncate(log, 10)
        return result

    monkeypatch.setattr(report.os, "fstat", shrinking)
    quoted = log_excerpt(log)
    assert quoted["bytes"] == 200 << 10 and quoted["text"].startswith("a" * 10)
