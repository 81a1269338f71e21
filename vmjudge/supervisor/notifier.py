"""The daemon's sender: a thread that delivers the outbox's messages (issue 35).

It runs beside the slots and the heartbeat and shares nothing with them but the queue's
database, so an SMTP server or a webhook that is down, slow or hanging costs this thread its
`timeout_seconds` per step and never a stage or a claim. One message at a time: claimed
(queue/outbox.py; with several hosts, by one of them), sent to each address it has not yet
reached, then settled: sent; tried again after a delay that doubles from `retry_seconds`, each
capped so that `max_tries` fit in `give_up_hours`; failed once those are spent or the receiver
refused it for good (a 5xx from SMTP, a 4xx from a webhook); dropped when it has no one to go to.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..config import Site
from ..config.notify import NotifySite
from ..errors import VmjudgeError
from ..notify import smtp, webhook
from ..notify.confirm import AS_WRITTEN
from ..notify.message import Message
from ..notify.secrets import credentials, webhook_secret
from ..queue.connection import QueueUnavailable
from ..queue.db import Queue
from ..queue.outbox import DROPPED, FAILED, OWNER, PENDING, SENT, OutboxRow, claim, reached, settle
from ..queue.owners import Owners
from ..queue.redact import url_shown
from ..reports.notice import owner_message, stale

log = logging.getLogger(__name__)


def retry_delay(notify: NotifySite, tries: int) -> float:
    """Seconds before try `tries` + 1: doubling from retry_seconds, each capped at an even share
    of give_up_hours, so all max_tries fit in it."""
    cap = notify.give_up_hours * 3600 / notify.max_tries
    return min(cap, notify.retry_seconds * 2 ** max(0, tries - 1))


def check_secrets(notify: NotifySite) -> None:
    """Read the secret files once, at the daemon's start: one that others may read, or that is
    missing, stops the daemon in one sentence rather than failing every message later."""
    if notify.smtp is not None and notify.smtp.credentials_file is not None:
        credentials(notify.smtp.credentials_file)
    if notify.webhook_secret_file is not None:
        webhook_secret(notify.webhook_secret_file)


@dataclass(frozen=True)
class Target:
    """One address a message goes to: `key` as the row's `delivered` keeps it, `shown` as logs
    and errors name it (a webhook's URL as scheme://host/… only: its path often holds its secret)."""

    key: str
    send: Callable[[Message], str]
    shown: str = ""

    @property
    def label(self) -> str:
        return self.shown or self.key


def email_target(notify: NotifySite, address: str) -> Target:
    assert notify.smtp is not None
    site = notify.smtp
    return Target(f"email:{address}", lambda m: smtp.send(site, address, m, notify.timeout_seconds))


def webhook_target(notify: NotifySite, url: str, shown: str | None = None) -> Target:
    assert notify.webhook_secret_file is not None
    path = notify.webhook_secret_file
    return Target(url, lambda m: webhook.post(url, webhook_secret(path), m, notify.timeout_seconds,
                                              notify.webhook_ca_file), shown or url_shown(url))


class Notifier:
    """The sender thread of one daemon. `idle`: how long it waits when nothing is due."""

    def __init__(self, site: Site, queue: Queue, idle: float = 1.0):
        self.notify, self.queue, self.idle = site.notify, queue, idle
        check_secrets(self.notify)
        targets = 1 + len(self.notify.organisers) + len(self.notify.webhooks)
        # Longer than one message's every connection can take: no other host takes it meanwhile.
        self.hold = 60 + 10 * self.notify.timeout_seconds * targets
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="notifier", daemon=True)
        self._failing = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the message in hand, waiting for it no longer than one step's timeout: a
        mail server that hangs does not hold the daemon's exit. A message cut short is claimed
        again when its hold runs out (docs/organisers.md, "Monitoring": a copy may then arrive twice,
        with one delivery id)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.notify.timeout_seconds)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.once()
            except QueueUnavailable as exc:
                if not self._failing:
                    log.error("notifications: %s (trying again shortly)", exc)
                self._failing, busy = True, False
            except Exception as exc:  # a bug here must not end the daemon's notifications
                log.error("notifications: %s: %s", type(exc).__name__, exc, exc_info=exc)
                busy = False
            else:
                self._failing = False
            if not busy:
                self._stop.wait(self.idle)

    def flush(self) -> None:
        """Send what is due now, in this thread, for no longer than the messages' hold (the
        daemon stopping because of an error: its own message is among them)."""
        deadline = time.monotonic() + self.hold
        while time.monotonic() < deadline and self.once():
            pass

    def once(self, at: float | None = None) -> bool:
        """Deliver the next due message, if any; whether there was one."""
        row = claim(self.queue.database, self.queue.host, self.hold, at)
        if row is None:
            return False
        self.deliver(row)
        return True

    def deliver(self, row: OutboxRow) -> None:
        host, database, now = self.queue.host, self.queue.database, time.time()
        try:
            message, targets = self._prepare(row, now)
        except QueueUnavailable:
            raise  # not the message's fault: it is claimed again once its hold runs out
        except VmjudgeError as exc:
            settle(database, row, host, DROPPED, str(exc))
            return
        if not isinstance(message, Message):  # not to be seen yet: waits until then, the try not counted
            settle(database, row, host, PENDING, None, message, tried=False)
            return
        delivered, errors, permanent = list(row.delivered), [], True
        for target in (t for t in targets if t.key not in row.delivered):
            try:
                said = target.send(message)
            except Exception as exc:  # noqa: BLE001 - a DeliveryError says whether to try again; any other fails again
                errors.append(f"{target.label}: {exc}" if isinstance(exc, VmjudgeError)
                              else f"{target.label}: {type(exc).__name__}: {exc}")
                permanent = permanent and getattr(exc, "permanent", True)
                continue
            log.info("notification %d (%s) to %s: %s", row.id, row.kind, target.label, said)
            delivered.append(target.key)
            if not reached(database, row, host, tuple(delivered)):
                return  # the hold ran out: another sender has the row now
        if not errors:
            settle(database, row, host, SENT)
            return
        error = "; ".join(errors)[:2000]
        spent = row.tries >= self.notify.max_tries or now - row.created > self.notify.give_up_hours * 3600
        if permanent or spent:
            log.warning("notification %d (%s) failed for good after %d tries: %s", row.id, row.kind, row.tries, error)
            settle(database, row, host, FAILED, error)
        else:
            settle(database, row, host, PENDING, error, now + retry_delay(self.notify, row.tries))

    def _prepare(self, row: OutboxRow, now: float) -> tuple[Message | float, list[Target]]:
        """The message (or when to look again: reports/notice.py) and its addresses; VmjudgeError
        when it has none to go to (dropped)."""
        notify = self.notify
        if row.audience == OWNER:
            address = Owners(self.queue.database).recipient(row)  # confirmed, or this is its confirmation
            if notify.smtp is None:
                raise VmjudgeError("no [notify.smtp] in site.toml to send email through")
            if row.kind in AS_WRITTEN:  # a confirmation, a sign-in link, an approval: written with the event
                return Message(kind=row.kind, subject=row.subject or "", text=row.body or "",
                               delivery=row.delivery), [email_target(notify, address)]
            if stale(self.queue, row):
                raise VmjudgeError(f"entry {row.entry_id} was queued again since")
            return owner_message(self.queue, row, now, notify.portal_url), [email_target(notify, address)]
        shown = [url_shown(u) for u in notify.webhooks]
        targets = [email_target(notify, a) for a in notify.organisers] + \
            [webhook_target(notify, u, s if shown.count(s) == 1 else f"{s} (webhook {i})")
             for i, (u, s) in enumerate(zip(notify.webhooks, shown, strict=True), 1)]
        if not targets:
            raise VmjudgeError("no organisers or webhooks in site.toml [notify]")
        text = (row.body or "") + ("" if row.events == 1 else f"\n\n({row.events} events in this digest)")
        return Message(kind=row.kind, subject=row.subject or f"vmjudge: {row.kind}", text=text + "\n",
                       delivery=row.delivery, data={"condition": row.condition, "entry_id": row.entry_id,
                                                    "events": row.events}), targets
