"""#38, the organiser's side (no VM; a real queue, the real portal through starlette's
TestClient, pages read as trees): an entry's attempts as a timeline with host, slot and the
infrastructure's reason, and the queue now, running per slot and waiting per owner."""

from __future__ import annotations

import pytest

from .html_tree import parse
from .web_home import WebHome, sign_in


@pytest.fixture
def olga(tmp_path):
    web = WebHome(tmp_path)
    client = web.client()
    assert sign_in(client, web.owners.add("olga", True)).status_code == 303
    return web, client


def entry(web, owner: str) -> int:
    return web.queue.add_entry("big", owner, False, "a" * 64, f"{owner}-entry.tar.gz", web.tar(f"{owner}.tar.gz"))


def test_an_entrys_attempts_read_as_a_timeline_with_host_slot_and_reason(olga):
    web, client = olga
    eid = entry(web, "alice")
    web.queue.claim_next(only=eid)
    web.queue.infra_failure(web.queue.start_stage(eid, "prep", 2), "vm-start", "the VM did not start", {})
    with web.queue.database.transaction() as db:
        db.execute("UPDATE entries SET not_before = 0 WHERE id = ?", (eid,))
    web.queue.claim_next(only=eid)
    web.queue.finish_stage(web.queue.start_stage(eid, "prep", 3), "passed", "setup.sh completed.", {},
                           next_stage="quiz")
    timeline = parse(client.get(f"/organiser/entries/{eid}").text).one("ol", id="attempts")
    attempts = timeline.all("li", cls="attempt")
    assert [a.attrs["data-status"] for a in attempts] == ["infra", "passed"]
    first, second = attempts
    assert "infra" in first.attrs["class"].split() and first.one(cls="reason").text == "Reason: vm-start"
    assert first.one("h3").text == "prep, attempt 1: infra" and second.one("h3").text == "prep, attempt 2: passed"
    assert [(a.one(cls="host").text, a.one(cls="slot").text) for a in attempts] == [(web.queue.host, "2"),
                                                                                    (web.queue.host, "3")]
    assert first.one("details").one("pre").text == "the VM did not start"


def test_the_queue_now_shows_each_slot_running_and_who_waits(olga):
    web, client = olga
    running = entry(web, "alice")
    waiting = [entry(web, "bob"), entry(web, "bob"), entry(web, "carol")]
    web.queue.claim_next(only=running)
    web.queue.start_stage(running, "prep", 1)
    page = parse(client.get("/organiser/queue").text)
    rows = page.one("table", id="running").one("tbody").all("tr")
    assert [[td.text for td in r.all("td")][:6] for r in rows] == [[web.queue.host, "1", str(running), "alice", "big",
                                                                    "prep"]]
    owners = [[td.text for td in r.all("td")] for r in page.one("table", id="waiting").one("tbody").all("tr")]
    assert [o[:3] for o in owners] == [["bob", "2", "2 at prep"], ["carol", "1", "1 at prep"]]
    assert owners[0][3].startswith(f"{waiting[0]}, submitted ")
    assert page.one("a", href="/organiser/queue") is not None  # in the organiser's navigation
    alice = web.client()
    assert sign_in(alice, web.owners.add("alice")).status_code == 303
    assert alice.get("/organiser/queue").status_code == 404 and "/organiser/queue" not in alice.get("/entries").text
