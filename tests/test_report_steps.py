"""#38: the report page's steps say no more than the report does (no VM, a real queue): a phase
that keeps its results back shows only what its feedback level allows, a parked entry stops at
its stage, and while being examined two entries' pages are the same whatever their exams did."""

from __future__ import annotations

import json
import time

from vmjudge.reports import participant
from vmjudge.reports.report import report_page

from .test_figures import PREP, QUIZ
from .test_participant_view import judge, masked_pair, normalised
from .test_queue_hosts import add, hosts


def failed_at_quiz(queue, tmp_path) -> int:
    eid = add(queue, tmp_path)
    queue.claim_next(only=eid)
    queue.finish_stage(queue.start_stage(eid, "prep", 0), "passed", "setup.sh completed.", {}, next_stage="quiz",
                       figures=PREP)
    queue.claim_next(only=eid)
    queue.finish_stage(queue.start_stage(eid, "quiz", 0), "failed", "a101: output does not match submission", {},
                       reason="quiz-mismatch", outcome="failed", figures=QUIZ)
    return eid


def page(queue, eid, feedback=participant.FULL) -> dict:
    seen = participant.Seen.at(queue.entry(eid), queue.stage_runs(eid), queue.scorings(eid), time.time(), feedback)
    return participant.report_page(seen)


def statuses(doc) -> list[tuple[str, str, str | None]]:
    return [(s["stage"], s["status"], s["reason"]) for s in doc["steps"]]


def test_a_phase_keeping_its_results_back_shows_its_level_and_no_more(queue_location, tmp_path):
    (queue,) = hosts(queue_location, tmp_path, "h")
    failed, scored = failed_at_quiz(queue, tmp_path), add(queue, tmp_path, owner="bob")
    judge(queue, scored)
    with queue.database.transaction() as db:
        db.execute("UPDATE entries SET published = ?", (time.time() - 1,))
    full = page(queue, failed)
    assert statuses(full) == [("prep", "passed", None), ("quiz", "failed", "quiz-mismatch"), ("exam", "not-run", None),
                              ("score", "not-run", None)]
    assert full["steps"][1]["message"] == "a101: output does not match submission" and full["kept_back"] is None
    errors = page(queue, failed, participant.ERRORS)
    assert statuses(errors) == statuses(full)  # where it failed and why: the level's whole point
    assert [s["message"] for s in errors["steps"]] == [None] * 4 and errors["figures"] == {}
    assert "tells only whether an entry failed" in errors["kept_back"]
    hidden = page(queue, scored, participant.ERRORS)
    assert statuses(hidden) == [(s, "kept-back", None) for s in ("prep", "quiz", "exam", "score")]
    assert (hidden["scores"], hidden["scorings"], hidden["figures"]) == ({}, [], {})
    for eid in (failed, scored):
        none = page(queue, eid, participant.NONE)
        assert statuses(none) == [(s, "kept-back", None) for s in ("prep", "quiz", "exam", "score")]
        assert [s["message"] for s in none["steps"]] == [None] * 4


def test_a_parked_entry_stops_at_its_stage(queue_location, tmp_path):
    (queue,) = hosts(queue_location, tmp_path, "h")
    eid = add(queue, tmp_path)
    for _ in range(3):  # the retry policy parks the entry after its third infrastructure failure
        with queue.database.transaction() as db:
            db.execute("UPDATE entries SET not_before = 0 WHERE id = ?", (eid,))
        queue.claim_next(only=eid)
        queue.infra_failure(queue.start_stage(eid, "prep", 0), "vm-start", "the VM did not start", {})
    doc = page(queue, eid)
    assert statuses(doc) == [("prep", "stopped", None), ("quiz", "waiting", None), ("exam", "waiting", None),
                             ("score", "waiting", None)]
    assert "vm-start" not in json.dumps(doc)  # the infrastructure's reasons are the organiser's


def test_while_being_examined_two_entries_report_pages_are_the_same(queue_location, tmp_path):
    queue, a, b = masked_pair(queue_location, tmp_path)
    docs = {eid: normalised(report_page(queue, eid), queue.entry(eid)) for eid in (a, b)}
    assert docs[a] == docs[b]
    assert [s["status"] for s in json.loads(docs[a])["steps"]] == ["passed", "passed", "running", "waiting"]
