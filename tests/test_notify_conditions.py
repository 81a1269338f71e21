"""#35's organisers' conditions that begin and end: another host down and back (told by the
heartbeat of a host sharing the PostgreSQL queue), and a daemon stopped by an error (a real
`serve` whose libvirt cannot be reached, no VM) then running again; each told once, sent to a
real SMTP server on loopback."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from vmjudge.config import QueueSite
from vmjudge.errors import InfrastructureError, VmjudgeError
from vmjudge.queue.conditions import daemon_started, watch_disk, watch_hosts
from vmjudge.queue.db import Queue
from vmjudge.queue.outbox import HOUR, SENT, listing
from vmjudge.supervisor.daemon import serve
from vmjudge.supervisor.heartbeat import Heartbeat
from vmjudge.supervisor.notifier import Notifier

from .notify_servers import SmtpServer
from .test_notify_outbox import notifier_site


def register(queue: Queue, name: str, lease: float = 30) -> None:
    queue.hosts.register(name, f"machine-{name}", 4242, 1, 0, lease, alive=lambda pid: False)


def test_a_host_down_and_back_is_told_once_each(queue_location):
    a = Queue(queue_location, host="a")
    register(a, "a")
    register(a, "b")
    now = time.time()
    assert watch_hosts(a.database, "a", 30, now) == []  # up, and never told: nothing to say
    assert watch_hosts(a.database, "a", 30, now + 31) == ["b"]
    assert watch_hosts(a.database, "a", 30, now + 32) == []  # still down: not told again
    [down] = listing(a.database)
    assert (down.kind, down.condition) == ("host-down", "host b")
    assert down.body.startswith("Host b has not been heard from since ") and "`vmjudge status`" in down.body
    with a.database.transaction() as db:  # b heard again, more than an hour later
        db.execute("UPDATE hosts SET heartbeat = ? WHERE name = 'b'", (now + HOUR + 35,))
    assert watch_hosts(a.database, "a", 30, now + HOUR + 40) == ["b"]
    back = listing(a.database)[0]
    assert (back.kind, back.body) == ("host-back", "Host b is back: its daemon is heard again.")
    a.hosts.stop("b")
    assert watch_hosts(a.database, "a", 30, now + HOUR + 50) == []  # stopped on purpose: not down
    assert len(listing(a.database)) == 2


def test_the_heartbeat_of_another_host_tells_of_a_host_gone_silent(pg_url, tmp_path):
    with SmtpServer() as server:
        site = notifier_site(tmp_path, server.port)
        site = replace(site, queue=QueueSite(url=pg_url, host="a", lease=10, grace=600))
        a, b = Queue(pg_url, host="a", lease=10), Queue(pg_url, host="b", lease=10)
        register(a, "a", 10)
        register(b, "b", 10)
        with b.database.transaction() as db:  # b's last heartbeat was a minute ago
            db.execute("UPDATE hosts SET heartbeat = ? WHERE name = 'b'", (time.time() - 60,))
        Heartbeat(site, a, busy=lambda: 0).beat()
        Heartbeat(site, a, busy=lambda: 0).beat()
        notifier = Notifier(site, a)
        assert notifier.once() and not notifier.once()
        [mail] = server.mailbox.to("ops@example.org")
    assert mail["Subject"].startswith("vmjudge: Host b has not been heard from since ")


def test_a_daemon_stopped_by_an_error_tells_the_organisers_at_once(tmp_path):
    with SmtpServer() as server:
        site = replace(notifier_site(tmp_path, server.port), uri="qemu+unix:///system?socket=/nonexistent/libvirt",
                       overcommit=True)
        site.layout.ensure()
        queue = Queue(site.layout.queue_db, host="a")
        with pytest.raises(InfrastructureError, match="cannot reach libvirt"):
            serve(site, queue, 1, until_idle=True)
        [mail] = server.mailbox.to("ops@example.org")
        text = mail.get_payload(decode=True).decode().replace("\r\n", " ")
        assert "The vmjudge daemon of a stopped because of an error: InfrastructureError: cannot reach libvirt" in text
        assert [r.state for r in listing(queue.database)] == [SENT]
        daemon_started(queue.database, "a")  # the next start: "back to normal", once
        daemon_started(queue.database, "a")
        rows = listing(queue.database)
        # Within the hour of the first message: "back" goes in the condition's digest, at the hour's end.
        assert len(rows) == 2 and rows[0].kind == "digest" and rows[0].not_before == rows[1].not_before + HOUR
        assert rows[0].body.endswith(" The vmjudge daemon of a runs again.") and rows[0].events == 1


def test_the_homes_disk_short_of_space_and_freed_is_told_once_each(tmp_path):
    site = replace(notifier_site(tmp_path, 1), notify=replace(notifier_site(tmp_path, 1).notify, disk_free_percent=5))
    queue = Queue(tmp_path / "queue.db", host="a")
    now = time.time()
    assert not watch_disk(queue.database, "a", 40.0, 5, "The home's disk", now)
    assert watch_disk(queue.database, "a", 3.2, 5, "The home's disk", now + 1)
    assert not watch_disk(queue.database, "a", 2.0, 5, "The home's disk", now + 2)
    [low] = listing(queue.database)
    assert low.kind == "disk-low" and low.body.startswith("The home's disk on a has 3.2 % free, below the 5 % of "
                                                          "[notify] disk_free_percent")
    assert watch_disk(queue.database, "a", 30.0, 5, "The home's disk", now + HOUR + 2)
    assert listing(queue.database)[0].body == "The home's disk on a has 30.0 % free again."
    # The heartbeat measures the real disk: with a threshold of 99.99 % any real disk is short of it.
    beat = Heartbeat(replace(site, notify=replace(site.notify, disk_free_percent=99.99)), Queue(tmp_path / "q2.db",
                                                                                                  host="a"), lambda: 0)
    beat.watch_home()
    beat.watch_home()
    [told] = listing(beat.queue.database)
    assert told.kind == "disk-low" and f"The home's disk ({tmp_path})" in told.body


def test_a_daemon_refused_at_its_start_is_not_a_daemon_stopped_by_an_error(tmp_path):
    """Its host's name held by a live daemon elsewhere: the refusal is the command's to print,
    and the organisers are not told that a daemon stopped, since none ran."""
    site = replace(notifier_site(tmp_path, 1), uri="qemu+unix:///system?socket=/nonexistent/libvirt", overcommit=True)
    site.layout.ensure()
    queue = Queue(site.layout.queue_db, host="a")
    register(queue, "a", lease=60)  # another machine's live daemon, as host a
    with pytest.raises(VmjudgeError, match="another vmjudge daemon is running as host 'a'"):
        serve(site, queue, 1, until_idle=True)
    assert listing(queue.database) == []
