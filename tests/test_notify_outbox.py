"""#35's delivery, on SQLite and on a real PostgreSQL server, without VMs: entries judged and
parked through the queue's own calls, their messages written in the same transaction, sent by
the daemon's sender (supervisor/notifier.py) to a real SMTP server (aiosmtpd) and a real HTTP
receiver on loopback. A participant's message not before the entry's publish time and made of
the participant view only; the organisers' once an hour, then a digest; an SMTP server down for
the first tries; a hanging webhook that holds no claim; two hosts sending each message once; a
process SIGKILLed between the event and the send."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from vmjudge.config import Site
from vmjudge.config.notify import NotifySite, SmtpSite
from vmjudge.queue.connection import QueueUnavailable
from vmjudge.queue.db import Queue
from vmjudge.queue.outbox import DROPPED, FAILED, HOUR, PENDING, SENT, claim, listing, organiser_event
from vmjudge.queue.owners import Owners
from vmjudge.reasons import explanation
from vmjudge.reports.notice import owner_message
from vmjudge.supervisor.notifier import Notifier, retry_delay

from .notify_servers import Receiver, SmtpServer, free_port
from .test_notify_channels import SECRET, private
from .waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
CAP = 20.0  # the exam's cap in the tests: its tenth is 2 s
EXAM_SECONDS = 0.123  # what the exam "took": for organisers only
ARCHIVE_SHA = "ab" * 32


def notifier_site(tmp_path: Path, smtp_port: int, webhooks: tuple[str, ...] = (), **kw) -> Site:
    secret = private(tmp_path / "webhook.secret", SECRET.decode())
    notify = NotifySite(organisers=("ops@example.org",), webhooks=webhooks, webhook_secret_file=secret,
                        smtp=SmtpSite(host="127.0.0.1", port=smtp_port, security="none", sender="judge@localhost"),
                        portal_url="https://judge.example.org", **{"retry_seconds": 0.05, **kw})
    return Site(home=tmp_path, notify=notify, profile="trial")  # as the suite's sites: not a confinement test


def new_entry(queue: Queue, tmp_path: Path, owner: str = "ana") -> int:
    queue.add_challenge("quiz1", tmp_path, "key")
    archive = tmp_path / "entry.zip"
    archive.write_bytes(b"entry")
    return queue.add_entry("quiz1", owner, False, ARCHIVE_SHA, "entry.zip", archive)


def judge(queue: Queue, entry_id: int, score: float = 0.75) -> None:
    """prep, quiz and exam passed (the exam's figures: EXAM_SECONDS of CAP), then scored."""
    for stage, nxt, figures in (("prep", "quiz", None), ("quiz", "exam", None),
                                ("exam", "score", {"stage_seconds": EXAM_SECONDS, "stage_limit": CAP})):
        queue.claim_next(only=entry_id)
        run = queue.start_stage(entry_id, stage, 0)
        queue.finish_stage(run, "passed", f"{stage} passed", {"host_path": "/var/lib/vmjudge/secret"},
                           next_stage=nxt, figures=figures,
                           exam={"records": 9, "completed": 8, "failed": 1, "timed_out": 0} if figures else None)
    queue.claim_next(only=entry_id)
    run = queue.start_stage(entry_id, "score", 0)
    queue.finish_stage(run, "scored", f"score {score}", {}, outcome="scored", scores={"score": score, "Se": 0.5})


def park(queue: Queue, entry_id: int) -> None:
    """Three infrastructure failures of prep: the retry policy parks the entry."""
    for _ in range(3):
        with queue.database.transaction() as db:  # the retry's delay, waited out
            db.execute("UPDATE entries SET not_before = 0 WHERE id = ?", (entry_id,))
        queue.claim_next(only=entry_id)
        run = queue.start_stage(entry_id, "prep", 0)
        queue.infra_failure(run, "libvirt-unreachable", "libvirt did not answer", {})
    assert queue.entry(entry_id).state == "parked"


@pytest.fixture
def queue(queue_location) -> Queue:
    q = Queue(queue_location, host="a")
    Owners(q.database).add("ana", email="ana@example.org")
    Owners(q.database).add("bo")  # gave no address
    return q


def test_a_judged_entrys_message_waits_for_its_publish_time_and_says_only_what_the_participant_sees(queue, tmp_path):
    entry_id = new_entry(queue, tmp_path)
    with SmtpServer() as server:
        notifier = Notifier(notifier_site(tmp_path, server.port), queue)
        judge(queue, entry_id)
        entry = queue.entry(entry_id)
        [row] = listing(queue.database)
        assert (row.audience, row.owner, row.entry_id, row.state, row.not_before) == \
            ("owner", "ana", entry_id, PENDING, entry.published)
        assert entry.published > time.time()  # the exam's first tenth has not passed yet
        assert not notifier.once()  # not due: nothing is claimed, nothing sent
        assert owner_message(queue, row, entry.published - 0.01, None) == entry.published  # being examined till then
        wait_for(notifier.once, CAP, "the message's sending at the publish time")
        [(at, to, mail)] = server.mailbox.mails
    assert at >= entry.published and to == ["ana@example.org"]
    assert mail["Subject"] == f"Entry {entry_id} for quiz1: Entry scored."
    assert mail["Message-ID"] == f"<vmjudge-outbox-{row.id}@vmjudge>"
    text = mail.get_payload(decode=True).decode().replace("\r\n", "\n")
    assert "Entry scored.\nScore: 0.7500\n" in text
    assert f"Report: https://judge.example.org/entries/{entry_id}" in text
    # Nothing the list of "my entries" leaves out: the exam's time, counts, manifests, the archive's hash.
    for secret in (str(EXAM_SECONDS), "0.5", "Se", "/var/lib", ARCHIVE_SHA, "records", "completed", "host_path"):
        assert secret not in text and secret not in mail["Subject"]
    [sent] = listing(queue.database)
    assert (sent.state, sent.tries, sent.delivered) == (SENT, 1, ("email:ana@example.org",))
    assert not notifier.once()


def test_a_failed_entrys_message_explains_its_reason_and_links_its_row(queue, tmp_path):
    entry_id = new_entry(queue, tmp_path)
    queue.claim_next(only=entry_id)
    run = queue.start_stage(entry_id, "prep", 0)
    queue.finish_stage(run, "failed", "setup.sh failed (exit status 1). Entry not scored.", {}, reason="setup-error",
                       outcome="failed")
    [row] = listing(queue.database)
    message = owner_message(queue, row, time.time(), "https://judge.example.org")
    assert not isinstance(message, float)
    assert (f"Entry not scored (prep: setup-error).\n\n{explanation('setup-error')}\n"
            "Every reason: https://judge.example.org/reasons#setup-error\n") in message.text


def test_the_message_is_written_in_the_transaction_that_ends_the_entry(queue, tmp_path, monkeypatch):
    """If the entry's end is not committed, neither is its message (and the other way round)."""
    entry_id = new_entry(queue, tmp_path)
    import vmjudge.queue.db as db_module

    def broken_event(db, entry, kind, detail):
        if kind == "done":
            raise RuntimeError("the disk filled up")
        return real_event(db, entry, kind, detail)
    real_event = db_module.event
    monkeypatch.setattr(db_module, "event", broken_event)
    with pytest.raises(RuntimeError, match="the disk filled up"):
        judge(queue, entry_id)
    assert queue.entry(entry_id).state == "running" and listing(queue.database) == []
    monkeypatch.setattr(db_module, "event", real_event)
    run = queue.stage_runs(entry_id)[-1]
    queue.finish_stage(run, "scored", "score", {}, outcome="scored", scores={"score": 1.0})
    assert [r.entry_id for r in listing(queue.database)] == [entry_id]


def test_no_address_no_message_and_an_address_taken_back_drops_it(queue, tmp_path):
    bo = new_entry(queue, tmp_path, owner="bo")
    judge(queue, bo)
    assert listing(queue.database) == []  # bo gave no address: nothing is written
    ana = new_entry(queue, tmp_path)
    judge(queue, ana)
    Owners(queue.database).set_email("ana", None)  # before the message's time came
    with SmtpServer() as server:
        notifier = Notifier(notifier_site(tmp_path, server.port), queue)
        assert notifier.once(at=queue.entry(ana).published)
        assert server.mailbox.mails == []
    [row] = listing(queue.database)
    assert (row.state, row.last_error) == (DROPPED, "the owner 'ana' gives no address now")


def test_an_organisers_re_run_sends_nothing_and_makes_an_old_message_stale(queue, tmp_path):
    entry_id = new_entry(queue, tmp_path)
    judge(queue, entry_id)
    queue.rerun(entry_id)  # the organiser's batch work: the first result is no longer the entry's
    judge(queue, entry_id)
    [row] = listing(queue.database)
    with SmtpServer() as server:
        assert Notifier(notifier_site(tmp_path, server.port), queue).once(at=time.time() + CAP)
        assert server.mailbox.mails == []
    assert listing(queue.database)[0].state == DROPPED
    assert listing(queue.database)[0].last_error == f"entry {entry_id} was queued again since"


def test_a_parked_entry_tells_its_owner_and_the_organisers_once_an_hour_then_a_digest(queue, tmp_path):
    with SmtpServer() as server, Receiver(SECRET) as receiver:
        notifier = Notifier(notifier_site(tmp_path, server.port, webhooks=(receiver.url,)), queue)
        first = new_entry(queue, tmp_path)
        park(queue, first)
        later = [new_entry(queue, tmp_path, owner="bo") for _ in range(2)]
        for entry_id in later:
            park(queue, entry_id)
        rows = sorted(listing(queue.database), key=lambda r: r.id)
        assert [(r.audience, r.kind, r.events) for r in rows] == \
            [("owner", "entry-parked", 1), ("organisers", "entry-parked", 1), ("organisers", "digest", 2)]
        assert rows[2].not_before == pytest.approx(rows[1].not_before + HOUR)
        while notifier.once():
            pass
        # The owner: the participant's verdict, no reason of the judge's.
        [owner_mail] = server.mailbox.to("ana@example.org")
        owner_text = owner_mail.get_payload(decode=True).decode()
        assert "a problem on the judge's side; the organisers have been told." in owner_text.replace("\r\n", " ")
        assert "libvirt" not in owner_text
        # The organisers: by email and by the signed webhook, once; the digest waits for the hour.
        [ops_mail] = server.mailbox.to("ops@example.org")
        assert (f"Entry {first} of quiz1 by ana was parked at stage prep after its retries: libvirt-unreachable "
                "(`vmjudge reasons libvirt-unreachable` says what it means and what to do).") in \
            ops_mail.get_payload(decode=True).decode().replace("\r\n", " ")
        [hook] = receiver.accepted()
        assert hook.json["kind"] == "entry-parked" and hook.json["condition"] == "entry-parked"
        assert notifier.once(at=rows[2].not_before)
        digest = server.mailbox.to("ops@example.org")[1]
        assert digest["Subject"] == "vmjudge: entries parked (digest)"
        body = digest.get_payload(decode=True).decode().replace("\r\n", "\n")
        assert all(f"Entry {e} of quiz1 by bo was parked" in body for e in later)
        assert "(2 events in this digest)" in body
        assert [h.json["kind"] for h in receiver.accepted()] == ["entry-parked", "digest"]
        assert receiver.received[-1].refused is None
        # An hour after the digest, the condition is told at once again.
        with queue.database.transaction() as db:
            organiser_event(db, "entry-parked", "entries parked", "Entry 99 was parked.", at=rows[2].not_before + HOUR)
        assert notifier.once(at=rows[2].not_before + HOUR)
        assert len(server.mailbox.to("ops@example.org")) == 3


def test_an_smtp_server_down_for_the_first_tries_then_up_gets_the_message_once(queue, tmp_path):
    port = free_port()
    notifier = Notifier(notifier_site(tmp_path, port), queue, idle=0.05)
    entry_id = new_entry(queue, tmp_path)
    park(queue, entry_id)  # the owner's and the organisers' messages, due at once
    notifier.start()
    try:
        wait_for(lambda: all(r.tries >= 2 for r in listing(queue.database)), 30, "two failed tries of each message")
        assert all(r.state == PENDING and "ConnectionRefusedError" in (r.last_error or "")
                   for r in listing(queue.database))
        with SmtpServer(port=port) as server:
            wait_for(lambda: all(r.state == SENT for r in listing(queue.database)), 30, "both messages sent")
            assert len(server.mailbox.to("ana@example.org")) == 1 and len(server.mailbox.to("ops@example.org")) == 1
    finally:
        notifier.stop()
    assert len(server.mailbox.mails) == 2


def test_a_message_is_failed_for_good_after_its_tries_and_the_backoff_is_bounded(queue, tmp_path):
    site = notifier_site(tmp_path, free_port(), max_tries=3, retry_seconds=0.01)
    notifier = Notifier(site, queue)
    with queue.database.transaction() as db:
        organiser_event(db, "gpu h1 0000:65:00.0", "GPU", "GPU 0000:65:00.0 of h1 was taken out of service.")
    for _ in range(3):
        wait_for(notifier.once, 10, "the message due again")
    [row] = listing(queue.database)
    assert (row.state, row.tries) == (FAILED, 3) and "ConnectionRefusedError" in row.last_error
    assert not notifier.once(at=time.time() + 86400)
    day = NotifySite(max_tries=8, retry_seconds=60, give_up_hours=24)
    delays = [retry_delay(day, tries) for tries in range(1, 8)]
    assert delays == [60, 120, 240, 480, 960, 1920, 3840]
    slow = NotifySite(max_tries=8, retry_seconds=3600, give_up_hours=24)  # each delay capped: 8 tries in a day
    assert [retry_delay(slow, tries) for tries in range(1, 8)] == [3600, 7200, 10800, 10800, 10800, 10800, 10800]


def test_a_hanging_webhook_holds_no_stage_and_no_claim(queue, tmp_path):
    with Receiver(SECRET, hang=True) as receiver:
        notifier = Notifier(notifier_site(tmp_path, free_port(), webhooks=(receiver.url,), timeout_seconds=2,
                                                retry_seconds=60), queue,
                            idle=0.05)
        with queue.database.transaction() as db:
            organiser_event(db, "host h2", "host h2", "Host h2 is down.")
        notifier.start()
        try:
            wait_for(lambda: len(receiver.received) == 1, 10, "the webhook's request")
            # The sender is stuck in the request; the queue goes on: an entry is claimed and judged.
            entry_id = new_entry(queue, tmp_path, owner="bo")
            judge(queue, entry_id)
            assert queue.entry(entry_id).state == "done"
            assert not receiver.released.is_set() and listing(queue.database)[0].claimed_by == "a"
            wait_for(lambda: listing(queue.database)[0].state == PENDING and listing(queue.database)[0].tries == 1
                     and listing(queue.database)[0].claimed_by is None, 10, "the hung try given up")
            assert "timed out" in listing(queue.database)[0].last_error
        finally:
            receiver.released.set()
            notifier.stop()


def test_a_process_killed_between_the_event_and_the_send_leaves_the_message_to_the_next_daemon(queue_location,
                                                                                              tmp_path):
    queue = Queue(queue_location, host="a")
    Owners(queue.database).add("ana", email="ana@example.org")
    entry_id = new_entry(queue, tmp_path)
    for stage, nxt in (("prep", "quiz"), ("quiz", "exam")):
        queue.claim_next(only=entry_id)
        queue.finish_stage(queue.start_stage(entry_id, stage, 0), "passed", "ok", {}, next_stage=nxt)
    child = textwrap.dedent(f"""
        import os, signal
        from vmjudge.queue.db import Queue
        queue = Queue({str(queue_location)!r}, host="a")
        for stage, nxt in (("exam", "score"), ("score", None)):
            queue.claim_next(only={entry_id})
            run = queue.start_stage({entry_id}, stage, 0)
            queue.finish_stage(run, "passed" if nxt else "scored", "ok", {{}}, next_stage=nxt,
                               outcome=None if nxt else "scored", scores=None if nxt else {{"score": 0.5}},
                               figures={{"stage_seconds": 0.1, "stage_limit": 1.0}} if nxt else None)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    killed = subprocess.run([sys.executable, "-c", child], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    with SmtpServer() as server:
        notifier = Notifier(notifier_site(tmp_path, server.port), Queue(queue_location, host="a"), idle=0.05)
        notifier.start()
        try:
            wait_for(lambda: len(server.mailbox.mails) == 1, 30, "the message after the restart")
            wait_for(lambda: listing(queue.database)[0].state == SENT, 10, "the message recorded as sent")
        finally:
            notifier.stop()
        assert len(server.mailbox.to("ana@example.org")) == 1


def test_two_hosts_on_postgresql_send_each_message_once(pg_url, tmp_path):
    a, b = Queue(pg_url, host="a"), Queue(pg_url, host="b")
    with Receiver(SECRET) as receiver:
        secret = private(tmp_path / "webhook.secret", SECRET.decode())
        site = Site(home=tmp_path, notify=NotifySite(webhooks=(receiver.url,), webhook_secret_file=secret))
        for n in range(40):
            with a.database.transaction() as db:
                organiser_event(db, f"condition {n}", f"condition {n}", f"Condition {n} happened.")
        senders = [Notifier(site, a, idle=0.05), Notifier(site, b, idle=0.05)]
        for s in senders:
            s.start()
        try:
            wait_for(lambda: all(r.state == SENT for r in listing(a.database)), 60, "every message sent")
        finally:
            for s in senders:
                s.stop()
        deliveries = receiver.deliveries()
    assert len(deliveries) == 40 and len(set(deliveries)) == 40
    assert all(r.refused is None for r in receiver.received)


def test_a_queue_made_before_notifications_gains_the_outbox_and_the_owners_address(queue_location):
    queue = Queue(queue_location)
    with queue.database.transaction() as db:
        db.execute("ALTER TABLE owners DROP COLUMN email")
        db.execute("DROP TABLE outbox")
    queue = Queue(queue_location)
    Owners(queue.database).add("cy", email="cy@example.org")
    assert Owners(queue.database).get("cy").email == "cy@example.org"
    assert listing(queue.database) == []



def test_a_message_another_host_is_claiming_is_skipped_not_waited_for(pg_url):
    """Host a holds the oldest row's lock in its claim's transaction; b's claim takes the next
    one at once (SKIP LOCKED), rather than waiting for a's and then sending it too."""
    a, b = Queue(pg_url, host="a"), Queue(pg_url, host="b")
    for n in range(2):
        with a.database.transaction() as db:
            organiser_event(db, f"condition {n}", f"condition {n}", f"Condition {n} happened.")
    got: dict[str, object] = {}
    with a.database.transaction() as db:
        held = db.execute("SELECT id FROM outbox ORDER BY id LIMIT 1 FOR UPDATE").fetchone()["id"]
        other = threading.Thread(target=lambda: got.setdefault("b", claim(b.database, "b", 60)))
        other.start()
        other.join(20)
        waited = other.is_alive()
    other.join(20)
    assert not waited, "b's claim waited for the row a was claiming"
    assert got["b"] is not None and got["b"].id != held and got["b"].claimed_by == "b"


def test_a_queue_that_fails_while_a_message_is_prepared_drops_nothing(queue, tmp_path, monkeypatch):
    entry_id = new_entry(queue, tmp_path)
    park(queue, entry_id)

    def unavailable(self, name):
        raise QueueUnavailable("the queue database cannot be used now (its server restarts)")
    with SmtpServer() as server:
        notifier = Notifier(notifier_site(tmp_path, server.port), queue)
        with monkeypatch.context() as patched:
            patched.setattr(Owners, "get", unavailable)
            with pytest.raises(QueueUnavailable):
                notifier.once()
        owners_row = [r for r in listing(queue.database) if r.audience == "owner"][0]
        assert owners_row.state == PENDING and owners_row.claimed_by == "a"  # held, not dropped
        while notifier.once(at=owners_row.claim_until + 1):  # its hold over: claimed again and sent
            pass
        assert len(server.mailbox.to("ana@example.org")) == 1
