"""`vmjudge show ID --wait`: an entry whose exam ended is "being examined" for participants until
its publish time (queue/publish.py); --wait waits for that moment, so a script (the tutorial's)
reads the final report without guessing how long to sleep. Entries made through the queue's own
calls, no VM."""

from __future__ import annotations

import json
import time

from .cli import run_cli
from .test_web_pages import judged
from .web_home import WebHome


def test_show_waits_for_the_publish_time_and_then_gives_the_score(tmp_path):
    web = WebHome(tmp_path)
    eid = judged(web, "scored")
    publish_at = time.time() + 3
    with web.queue.database.transaction() as db:
        db.execute("UPDATE entries SET published = ? WHERE id = ?", (publish_at, eid))
    now = json.loads(run_cli("show", str(eid), "--json", home=web.home).stdout)
    assert "being examined" in now["report"] and not now.get("scores"), now
    waited = run_cli("show", str(eid), "--json", "--wait", home=web.home)
    assert waited.returncode == 0, waited.stderr
    assert time.time() >= publish_at  # it came back no earlier than the publish time
    doc = json.loads(waited.stdout)
    assert "being examined" not in doc["report"] and doc["scores"]["score"] == 0.75, doc


def test_show_wait_returns_at_once_for_an_entry_with_nothing_held_back(tmp_path):
    web = WebHome(tmp_path)
    eid = judged(web, "failed")
    done = run_cli("show", str(eid), "--json", "--wait", home=web.home)
    assert done.returncode == 0 and json.loads(done.stdout)["reason"] == "setup-error", done.stdout
