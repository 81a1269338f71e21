"""#35's faults against a running daemon, without VMs: the real `vmjudge daemon` process (or, for
the stages, the real serve() with stand-in stage bodies, as tests/test_daemon_progress.py), on
libvirt's test driver (test:///default, in-process: no libvirtd is touched, no VM is made), with
[notify] in site.toml to a real SMTP server (aiosmtpd) and a real webhook receiver on loopback.

- SIGKILLed between the event and the send: a judged entry's message waits for its publish time;
  the daemon is killed before it, started again after it, and the message arrives once.
- SIGKILLed mid-send (the receiver holds the request): the next daemon of the host gives the
  message back at its start and sends it again at once, with the same X-Vmjudge-Delivery; the
  receiver sees two signed requests with one delivery id, the documented at-least-once case.
- Two daemons, two hosts' homes on one PostgreSQL queue: each message is sent once.
- A webhook that hangs: the daemon's stages run and end meanwhile, and the daemon's stop waits
  for the sender no longer than timeout_seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from vmjudge.config import load_site
from vmjudge.notify.signature import DELIVERY
from vmjudge.queue.db import Queue
from vmjudge.queue.outbox import PENDING, SENT, listing, organiser_event
from vmjudge.queue.owners import Owners
from vmjudge.stages.context import StageOutcome
from vmjudge.supervisor import evaluate
from vmjudge.supervisor.daemon import serve

from .notify_servers import Receiver, SmtpServer, free_port
from .test_notify_channels import SECRET, private
from .test_notify_outbox import judge, new_entry
from .waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
TEST_DRIVER = {"VMJUDGE_URI": "test:///default", "VMJUDGE_ACCEL": "tcg"}


def daemon_home(tmp_path: Path, location: str | Path, smtp_port: int, webhook: str | None = None,
                timeout: float = 30, host: str = "a", organisers: tuple[str, ...] = ()) -> Path:
    """A home of host `host` whose site.toml sends through the loopback servers, its queue at `location`."""
    home = tmp_path / ("home" if host == "a" else f"home-{host}")
    home.mkdir(exist_ok=True)
    secret = private(tmp_path / "webhook.secret", SECRET.decode())
    queue = f'url = "{location}"\n' if isinstance(location, str) else ""
    hooks = f'webhooks = ["{webhook}"]\nwebhook_secret_file = "{secret}"\n' if webhook else ""
    names = ", ".join(f'"{o}"' for o in organisers)
    (home / "site.toml").write_text(
        f'[queue]\nhost = "{host}"\n{queue}\n'
        f'[notify]\norganisers = [{names}]\n{hooks}retry_seconds = 60\ntimeout_seconds = {timeout}\n'
        'portal_url = "https://judge.example.org"\n\n'
        f'[notify.smtp]\nhost = "127.0.0.1"\nport = {smtp_port}\nsecurity = "none"\nfrom = "judge@localhost"\n')
    return home


def home_queue(home: Path) -> Queue:
    site = load_site(home)
    site.layout.ensure()
    return Queue(site.queue.url or site.layout.queue_db, host=site.queue.host)


class Daemon:
    """`vmjudge daemon` (no --until-idle: it waits for work, as in production) in its own process."""

    def __init__(self, home: Path, queue: Queue):
        self.home, self.queue = home, queue
        self.path = home / f"daemon-{time.monotonic_ns()}.log"
        self.log = open(self.path, "w")  # noqa: SIM115 - closed in stop() or on leaving
        env = {**os.environ, **TEST_DRIVER, "VMJUDGE_HOME": str(home)}
        self.proc = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "daemon", "-q"], cwd=REPO, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self.started, 60, "the daemon's start")

    def started(self) -> bool:
        assert self.proc.poll() is None, self.said()
        return any(h.name == self.queue.host and h.pid == self.proc.pid and not h.stopped
                   for h in self.queue.hosts.all())

    def said(self) -> str:
        """What it wrote on stdout and stderr so far."""
        return self.path.read_text()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL

    def stop(self) -> int:
        """SIGTERM, as systemd stops it; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        finally:
            self.log.close()

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.log.close()


def later_rounds_done(queue: Queue, n: int) -> None:
    """Wait until the senders have sent a message written now: they take the outbox in id order,
    so by then every round that could have sent an earlier message again has run. What a test
    asserts was not sent again, it asserts after this, not after a guess at how long rounds take."""
    with queue.database.transaction() as db:
        organiser_event(db, f"sentinel {n}", "Sentinel", f"Sentinel {n}.")
    newest_sent = lambda: listing(queue.database)[0].state == SENT  # noqa: E731 (listing: newest first)
    wait_for(newest_sent, 30, "a message written after it to be sent")


def test_a_daemon_killed_between_the_event_and_the_send_sends_it_once_after_its_restart(queue_location,
                                                                                      tmp_path):
    with SmtpServer() as server:
        home = daemon_home(tmp_path, queue_location, server.port, organisers=("org@example.org",))
        queue = home_queue(home)
        Owners(queue.database).add("ana", email="ana@example.org")
        entry_id = new_entry(queue, tmp_path)  # judged before the daemon starts, which would claim it
        judge(queue, entry_id)  # the entry's end and its message, in one transaction
        [row] = listing(queue.database)
        assert row.state == PENDING and row.not_before > time.time()  # waits for the publish time
        with Daemon(home, queue) as first:
            first.kill()  # before the publish time: nothing was sent
        assert server.mailbox.mails == []
        assert [(r.state, r.tries, r.claimed_by) for r in listing(queue.database)] == [(PENDING, 0, None)]
        wait_for(lambda: time.time() > row.not_before, 30, "the entry's publish time")
        with Daemon(home, queue) as second:
            wait_for(lambda: len(server.mailbox.mails) == 1, 30, "the message from the restarted daemon")
            wait_for(lambda: listing(queue.database)[0].state == SENT, 10, "the message recorded as sent")
            later_rounds_done(queue, 1)  # it is not sent again
            assert second.stop() == 0, second.said()
        with Daemon(home, queue) as third:  # and a daemon started later does not send it either
            later_rounds_done(queue, 2)
            assert third.stop() == 0, third.said()
    participants = [m for m in server.mailbox.mails if m[1] != ["org@example.org"]]
    assert len(server.mailbox.mails) - len(participants) == 2  # the two sentinels, to the organiser
    [(at, to, mail)] = participants
    assert to == ["ana@example.org"] and at >= row.not_before
    assert mail["Subject"] == f"Entry {entry_id} for quiz1: Entry scored."
    assert [(r.state, r.tries) for r in listing(queue.database)] == [(SENT, 1)] * 3  # and the two sentinels


def test_a_daemon_killed_mid_send_sends_again_at_its_restart_with_the_same_delivery_id(queue_location, tmp_path):
    with Receiver(SECRET, hang=True) as receiver:
        home = daemon_home(tmp_path, queue_location, free_port(), webhook=receiver.url)
        queue = home_queue(home)
        with queue.database.transaction() as db:
            organiser_event(db, "gpu a 0000:65:00.0", "GPU", "GPU 0000:65:00.0 of a was taken out of service.")
        [row] = listing(queue.database)
        with Daemon(home, queue) as first:
            wait_for(lambda: len(receiver.received) == 1, 30, "the webhook's request, held by the receiver")
            first.kill()
        held = listing(queue.database)[0]
        assert (held.state, held.tries, held.claimed_by) == (PENDING, 1, "a")
        assert held.claim_until > time.time() + 60  # left alone, it would wait minutes for its hold to run out
        receiver.hang = False
        began = time.time()
        with Daemon(home, queue) as second:
            wait_for(lambda: listing(queue.database)[0].state == SENT, 30, "the message sent again by the restart")
            assert time.time() - began < 30
            later_rounds_done(queue, 1)
            assert second.stop() == 0
            assert "1 notifications this host was sending when its daemon stopped will go again" in second.said()
        deliveries = [r.headers[DELIVERY] for r in receiver.received]
    # At least once: the receiver got it twice, each signed anew (neither taken for a replay), with the
    # one delivery id the organisers' guide tells receivers to drop a second copy by.
    assert deliveries == [row.delivery, row.delivery, "vmjudge-outbox-2"]  # the sentinel last, once
    assert row.delivery == "vmjudge-outbox-1" and [r.refused for r in receiver.received] == [None, None, None]
    assert receiver.received[0].headers["X-Vmjudge-Signature"] != receiver.received[1].headers["X-Vmjudge-Signature"]
    assert receiver.received[0].body == receiver.received[1].body
    sent = listing(queue.database)[-1]  # the oldest: the sentinel came after it
    assert (sent.state, sent.tries, sent.delivered) == (SENT, 2, (receiver.url,))


def test_two_daemons_on_one_postgresql_queue_send_each_message_once(pg_url, tmp_path):
    """Both running before the messages are written, and the receiver slow enough (0.1 s a
    request) that both senders are seen holding messages: each one still arrives once."""
    with Receiver(SECRET, delay=0.1) as receiver:
        homes = [daemon_home(tmp_path, pg_url, free_port(), webhook=receiver.url, host=h) for h in ("a", "b")]
        queues = [home_queue(home) for home in homes]
        with Daemon(homes[0], queues[0]) as a, Daemon(homes[1], queues[1]) as b:
            with queues[0].database.transaction() as db:
                for n in range(40):
                    organiser_event(db, f"condition {n}", f"condition {n}", f"Condition {n} happened.")
            holders: set[str] = set()

            def all_sent() -> bool:
                rows = listing(queues[0].database)
                holders.update(r.claimed_by for r in rows if r.claimed_by)
                return all(r.state == SENT for r in rows)
            wait_for(all_sent, 120, "every message sent")
            later_rounds_done(queues[0], 1)  # nothing is sent again
            assert a.stop() == 0 and b.stop() == 0, a.said() + b.said()
        deliveries = receiver.deliveries()
    assert holders == {"a", "b"}  # both hosts' senders took part
    rows = listing(queues[0].database)
    assert sorted(deliveries) == sorted(r.delivery for r in rows) and len(deliveries) == 41  # and the sentinel
    assert all(r.refused is None for r in receiver.received) and all(r.tries == 1 for r in rows)


class Passing:
    """Every stage passes and stage 4 scores; each notes whether the daemon's sender was then
    held in the hanging webhook's request (the outbox row claimed by this host)."""

    def __init__(self, receiver: Receiver):
        self.receiver, self.held = receiver, []

    def __call__(self, queue, site, entry, stage, run, slot, cancel):
        wait_for(lambda: len(self.receiver.received) == 1, 30, "the webhook's request")
        self.held.append(listing(queue.database)[0].claimed_by == "a")
        if stage.name == "score":
            return StageOutcome("scored", "scored", scores={"score": 1.0}, manifest={})
        return StageOutcome("passed", "ok", manifest={})


def test_a_hanging_webhook_holds_none_of_the_daemons_stages_and_its_stop_waits_a_bounded_time(tmp_path,
                                                                                              monkeypatch):
    timeout = 15.0
    with Receiver(SECRET, hang=True) as receiver:  # it would hold each request for 60 s
        home = daemon_home(tmp_path, tmp_path / "home" / "queue.db", free_port(), webhook=receiver.url,
                           timeout=timeout)
        for key, value in TEST_DRIVER.items():
            monkeypatch.setenv(key, value)
        site = load_site(home)
        site.layout.ensure()
        queue = Queue(site.layout.queue_db, host="a")
        queue.add_challenge("beats", tmp_path, "key")
        with queue.database.transaction() as db:
            organiser_event(db, "host b", "host b", "Host b is down.")
        entries = [queue.add_entry("beats", o, False, "0" * 64, "x-entry.zip", Path("/x")) for o in ("al", "bo")]
        stand_in = Passing(receiver)
        monkeypatch.setattr(evaluate, "_run", stand_in)
        began = time.monotonic()
        serve(site, queue, 1, until_idle=True)
        took = time.monotonic() - began
        # Both entries judged, every stage while the sender was stuck in the request.
        assert [queue.entry(e).state for e in entries] == ["done", "done"]
        assert stand_in.held == [True] * 8
        # The stop waited for the sender at most timeout_seconds (its try times out by then), not
        # for the receiver's minute.
        assert took < timeout + 20, took
        wait_for(lambda: listing(queue.database)[0].claimed_by is None, timeout + 5, "the hung try given up")
        row = listing(queue.database)[0]
        assert (row.state, row.tries) == (PENDING, 1) and "timed out" in (row.last_error or "")
        assert len(receiver.received) == 1
