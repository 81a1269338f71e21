"""#35's outbox under `[retention] outbox_days`, on SQLite and on a real PostgreSQL server,
without VMs: messages taken to each state by the real sender (supervisor/notifier.py) against a
real SMTP server on loopback (sent), a closed port (failed after its one try, or pending between
tries) and an owner who took back their address (dropped); aged by moving their times back in
the database, as a fixture; then `vmjudge gc` (retention.collect, and the command itself) removes
exactly the finished ones old enough, and never a message still to be sent."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from vmjudge.config import Retention, load_site
from vmjudge.queue.db import Queue
from vmjudge.queue.outbox import DROPPED, FAILED, HOUR, PENDING, SENT, claim, listing, organiser_event
from vmjudge.queue.owners import Owners
from vmjudge.queue.retention import DAY, collect
from vmjudge.supervisor.notifier import Notifier

from .cli import run_cli
from .notify_servers import SmtpServer, free_port
from .test_notify_outbox import judge, new_entry, notifier_site


def tell(queue: Queue, condition: str, at: float | None = None) -> int:
    """An organisers' message of its own condition (told at once); its id."""
    with queue.database.transaction() as db:
        organiser_event(db, condition, condition, f"{condition} happened.", at=at)
    return max(r.id for r in listing(queue.database))


def age(queue: Queue, row_id: int, days: float) -> None:
    """Move the row's times back by `days`: it was written, and sent or failed, that long ago (its
    next try, if it has one to come, stays where the sender put it)."""
    with queue.database.transaction() as db:
        db.execute("UPDATE outbox SET created = created - ?, not_before = not_before - ?, finished = finished - ? "
                   "WHERE id = ?", (days * DAY,) * 3 + (row_id,))


def states(queue: Queue) -> dict[int, str]:
    return {r.id: r.state for r in listing(queue.database, limit=1000)}


def every_state(queue: Queue, tmp_path: Path) -> dict[str, int]:
    """One message in each state, by the real sender; their ids by name."""
    Owners(queue.database).add("ana", email="ana@example.org")
    Owners(queue.database).add("cy", email="cy@example.org")
    ids: dict[str, int] = {}
    with SmtpServer() as server:
        notifier = Notifier(notifier_site(tmp_path, server.port), queue)
        for name in ("old sent", "new sent"):
            ids[name] = tell(queue, name)
            assert notifier.once()
        judge(queue, new_entry(queue, tmp_path, owner="cy"))  # its message: pending till the publish time
        Owners(queue.database).set_email("cy", None)
        assert notifier.once(at=time.time() + 60)
        ids["old dropped"] = max(r.id for r in listing(queue.database))
        ids["old held"] = tell(queue, "old held")
        held = claim(queue.database, "another-host", 3600)  # a sender on another host has it now
        assert held is not None and held.id == ids["old held"]
        judge(queue, new_entry(queue, tmp_path))  # ana's: waits for the entry's publish time, never tried
        ids["unpublished"] = max(r.id for r in listing(queue.database))
        with queue.database.transaction() as db:  # the entry is published in a year: its message waits till then
            db.execute("UPDATE outbox SET created = created - ?, not_before = ?, next_try = ? WHERE id = ?",
                       (400 * DAY, time.time() + 365 * DAY, time.time() + 365 * DAY, ids["unpublished"]))
    down = Notifier(notifier_site(tmp_path, free_port(), max_tries=1), queue)
    ids["old failed"] = tell(queue, "old failed")
    assert down.once()
    again = Notifier(notifier_site(tmp_path, free_port(), max_tries=5, retry_seconds=3600), queue)
    ids["old between tries"] = tell(queue, "old between tries")
    assert again.once() and not again.once()
    for name, row_id in ids.items():
        if name.startswith("old"):
            age(queue, row_id, 400)
    got = states(queue)
    assert {name: got[i] for name, i in ids.items()} == {
        "old sent": SENT, "new sent": SENT, "old dropped": DROPPED, "old held": PENDING,
        "unpublished": PENDING, "old failed": FAILED, "old between tries": PENDING}
    return ids


def test_gc_removes_the_messages_that_ended_long_enough_ago_and_never_one_still_to_be_sent(queue_location,
                                                                                           tmp_path):
    queue = Queue(queue_location, host="a")
    ids = every_state(queue, tmp_path)
    site = replace(notifier_site(tmp_path, 1), retention=Retention(outbox_days=30))
    before = states(queue)
    dry = collect(site, queue, dry_run=True)
    assert dry.messages == 3 and states(queue) == before  # counted, nothing removed
    report = collect(site, queue)
    assert report.messages == 3
    assert report.lines()[-1] == "notifications: removed 3 sent, failed or dropped more than 30 days ago " \
                                 "(outbox_days = 30)"
    assert report.as_json()["notifications"] == 3
    kept = {name for name, i in ids.items() if i in states(queue)}
    assert kept == {"new sent", "old held", "unpublished", "old between tries"}
    assert collect(site, queue).messages == 0
    # The messages still to be sent still go: the one between tries when its next try comes, the held
    # one when its hold runs out.
    with SmtpServer() as server:
        notifier = Notifier(notifier_site(tmp_path, server.port), queue)
        while notifier.once(at=time.time() + 2 * HOUR):
            pass
        assert sorted(m["Subject"] for _, _, m in server.mailbox.mails) == \
            ["vmjudge: old between tries happened.", "vmjudge: old held happened."]


def test_without_outbox_days_every_message_is_kept(queue_location, tmp_path):
    queue = Queue(queue_location, host="a")
    every_state(queue, tmp_path)
    before = states(queue)
    report = collect(replace(notifier_site(tmp_path, 1), retention=Retention(home_disk_days=0)), queue)
    assert report.messages == 0 and states(queue) == before
    assert not any(line.startswith("notifications:") for line in report.lines())


def test_a_message_of_the_last_hour_stays_for_the_once_an_hour_rule(queue_location, tmp_path):
    """outbox_days = 0 removes what ended, but not a condition's message of the last hour: the
    next event of that condition still goes into the hour's digest, not out at once."""
    queue = Queue(queue_location, host="a")
    site = replace(notifier_site(tmp_path, 1), retention=Retention(outbox_days=0))
    with SmtpServer() as server:
        notifier = Notifier(replace(site, notify=notifier_site(tmp_path, server.port).notify), queue)
        first = tell(queue, "gpu h1 0000:65:00.0")
        assert notifier.once()
        now = time.time()
        assert collect(site, queue, now=now + 1).messages == 0 and first in states(queue)
        tell(queue, "gpu h1 0000:65:00.0", at=now + 2)
        [digest, told] = listing(queue.database)
        assert (told.id, told.state, digest.kind, digest.state) == (first, SENT, "digest", PENDING)
        assert collect(site, queue, now=now + HOUR + 1).messages == 1  # the hour over: it may go
        assert list(states(queue)) == [digest.id]


def test_the_gc_command_reads_outbox_days_from_site_toml(queue_location, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    url = f'[queue]\nurl = "{queue_location}"\n' if isinstance(queue_location, str) else ""
    (home / "site.toml").write_text(f"[retention]\noutbox_days = 30\n{url}")
    site = load_site(home)
    site.layout.ensure()
    queue = Queue(site.queue.url or site.layout.queue_db, host="a")
    ids = every_state(queue, tmp_path)
    dry = run_cli("gc", "--dry-run", "--json", home=home)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["notifications"] == 3 and len(states(queue)) == len(ids)
    done = run_cli("gc", home=home)
    assert done.returncode == 0, done.stderr
    assert "notifications: removed 3 sent, failed or dropped more than 30 days ago (outbox_days = 30)\n" in done.stdout
    assert sorted(states(queue)) == sorted(ids[n] for n in ("new sent", "old held", "unpublished",
                                                            "old between tries"))
    (home / "site.toml").write_text(f"[retention]\noutbox_days = -1\n{url}")
    refused = run_cli("gc", home=home)
    assert refused.returncode != 0 and "outbox_days" in refused.stderr
