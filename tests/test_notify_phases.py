"""#35 in a contest (#40): a participant's message is seen at its phase's feedback level, and an
entry of a phase that gives no feedback until published ("none", only "received" to its owner)
has its message wait for the publication, since its arrival alone would tell the entry ended.
On SQLite and PostgreSQL, with test_phases.py's contest and a real SMTP server on loopback."""

from __future__ import annotations

import time

from vmjudge.queue.outbox import PENDING, SENT, listing
from vmjudge.queue.owners import Owners
from vmjudge.reports.notice import LOOK_AGAIN
from vmjudge.supervisor.notifier import Notifier

from .notify_servers import SmtpServer
from .test_notify_outbox import notifier_site
from .test_phases import backend, expected, make_contest

__all__ = ["backend"]


def text_of(mail) -> str:
    return mail.get_payload(decode=True).decode().replace("\r\n", "\n")


def test_a_phase_without_feedback_sends_its_message_only_once_published(tmp_path, backend):
    c = make_contest(tmp_path, backend, validation='feedback = "none"')
    Owners(c.queue.database).add("alice", email="alice@example.org")
    a1 = c.submit("alice")
    c.judge(a1)
    v1 = c.carry(a1, "validation")
    c.judge(v1, wrong=1)
    rows = sorted(listing(c.queue.database), key=lambda r: r.id)
    assert [r.entry_id for r in rows] == [a1, v1]
    due = max(r.not_before for r in rows)
    with SmtpServer() as server:
        notifier = Notifier(notifier_site(tmp_path, server.port), c.queue)
        assert notifier.once(at=due) and notifier.once(at=due)  # each row taken once
        [mail] = server.mailbox.to("alice@example.org")
        assert mail["Subject"] == f"Entry {a1} for contest: Entry scored."
        assert f"for contest, phase sanity:\n\nEntry scored.\nScore: {expected('sanity'):.4f}\n" in text_of(mail)
        kept = listing(c.queue.database, (PENDING,))
        assert [(r.entry_id, r.tries) for r in kept] == [(v1, 0)]  # waiting, no try spent
        assert kept[0].next_try >= time.time() + LOOK_AGAIN - 5
        c.vmjudge("publish", "contest", "--phase", "validation")
        assert notifier.once(at=max(due, kept[0].next_try))
        [_, published] = server.mailbox.to("alice@example.org")
    assert published["Subject"] == f"Entry {v1} for contest: Entry scored."
    assert f"phase validation:\n\nEntry scored.\nScore: {expected('validation', 1):.4f}\n" in text_of(published)
    assert {r.state for r in listing(c.queue.database)} == {SENT}
