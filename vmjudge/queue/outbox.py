"""The outbox: notifications waiting to go out, written in the transaction of the event that
causes them (issue 35).

Written with the event, a notification can be lost only with the event itself: a daemon killed
after the entry's result was committed finds its message here when it (or another host) starts
again, and one killed before has neither. A sender (supervisor/notifier.py) claims one due row
at a time, like a stage: the claim holds until `claim_until`, and with several hosts on
PostgreSQL a row another host is claiming is skipped (SKIP LOCKED), never waited for, so each
message is sent by one host. A row remembers the addresses it reached (`delivered`), so a retry
sends only to the others; what cannot be made exact is a host dying between a server's "accepted"
and the row's update, after which the message goes again (when the host's daemon starts again,
release_host, or its claim runs out), with the same delivery id (Message-ID, X-Vmjudge-Delivery)
for the receiver to drop.

Two audiences. A participant (`owner`) who gave an email address, and confirmed it (issue 54:
owners.py), hears when an entry of theirs ends: the row names only the entry, and its text is
built when it is sent, from the participant view (reports/notice.py), no earlier than the entry's
publish time (`not_before`; publish.py). An unconfirmed address gets one kind of message only:
its confirmation (notify/confirm.py), whose row holds its text and the `address` it is for.
The organisers hear of conditions (an entry parked, a GPU out of service and back): the row
holds its text, and one condition is told at most once an hour; what happens after that within
the hour is added to one digest, sent when the hour is over.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..notify.confirm import KIND as CONFIRM
from ..notify.confirm import SIGNIN
from ..reasons import find
from .connection import Database, Db
from .rows import stamp

OWNER, ORGANISERS = "owner", "organisers"
HOUR = 3600.0  # one message per condition in this long
DAY = 24 * HOUR  # confirmations are counted over this long (owners.py), so kept at least this long
PENDING, SENT, FAILED, DROPPED = "pending", "sent", "failed", "dropped"
STATES = (PENDING, SENT, FAILED, DROPPED)
FINISHED = (SENT, FAILED, DROPPED)  # for good: no sender takes them again


@dataclass(frozen=True)
class OutboxRow:
    id: int
    kind: str  # entry-judged | entry-parked | gpu-out | gpu-back | ... ; "digest" gathers a condition's hour
    audience: str  # owner | organisers
    owner: str | None
    entry_id: int | None
    evaluation: int | None  # the entry's evaluation it tells of: a re-run since makes it stale
    condition: str | None
    subject: str | None  # the organisers' messages: written with the event
    body: str | None
    events: int  # how many events it tells of (a digest's count)
    created: float
    not_before: float
    state: str
    tries: int
    next_try: float
    claimed_by: str | None
    claim_until: float | None
    delivered: tuple[str, ...]
    last_error: str | None
    finished: float | None
    address: str | None = None  # a confirmation's: the address it goes to, and only while unconfirmed

    @classmethod
    def from_row(cls, r: Any) -> OutboxRow:
        return cls(id=int(r["id"]), kind=r["kind"], audience=r["audience"], owner=r["owner"],
                   entry_id=r["entry_id"], evaluation=r["evaluation"], condition=r["condition"],
                   subject=r["subject"], body=r["body"], events=int(r["events"]), created=float(r["created"]),
                   not_before=float(r["not_before"]), state=r["state"], tries=int(r["tries"]),
                   next_try=float(r["next_try"]), claimed_by=r["claimed_by"],
                   claim_until=None if r["claim_until"] is None else float(r["claim_until"]),
                   delivered=tuple(json.loads(r["delivered"])), last_error=r["last_error"],
                   finished=None if r["finished"] is None else float(r["finished"]), address=r["address"])

    @property
    def delivery(self) -> str:
        """The same for every try of this message: receivers drop a second copy by it."""
        return f"vmjudge-outbox-{self.id}"


def _insert(db: Db, kind: str, audience: str, at: float, not_before: float, owner: str | None = None,
            entry_id: int | None = None, evaluation: int | None = None, condition: str | None = None,
            subject: str | None = None, body: str | None = None, address: str | None = None) -> None:
    db.execute("INSERT INTO outbox (kind, audience, owner, entry_id, evaluation, condition, subject, body, created, "
               "not_before, next_try, address) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
               (kind, audience, owner, entry_id, evaluation, condition, subject, body, at, not_before, not_before,
                address))


def entry_ended(db: Db, entry_id: int, at: float | None = None) -> None:
    """Within the transaction that ends the entry (done, or parked after its retries), once its
    publish time is recorded: its owner's message, if the owner gave an address, confirmed, and
    the entry is theirs (not the organiser's batch re-run); and for a parked entry, the organisers'."""
    at = time.time() if at is None else at
    e = db.execute("SELECT e.id, e.challenge, e.owner, e.state, e.stage, e.reason, e.evaluation, e.batch, "
                   "e.published, o.email FROM entries e LEFT JOIN owners o ON o.name = e.owner "
                   "AND o.revoked_at IS NULL AND o.email_confirmed_at IS NOT NULL WHERE e.id = ?",
                   (entry_id,)).fetchone()
    if e is None:
        return
    parked = e["state"] == "parked"
    kind = "entry-parked" if parked else "entry-judged"
    if e["email"] and not e["batch"]:
        publish = float(e["published"]) if e["published"] is not None else at
        _insert(db, kind, OWNER, at, max(at, publish), owner=e["owner"], entry_id=entry_id,
                evaluation=e["evaluation"])
    if parked:
        said = find(e["reason"])
        how = "at once, as the challenge's own fault" if said is not None and said.fault == "challenge" else \
            "after its retries"
        organiser_event(db, "entry-parked", "entries parked", f"Entry {entry_id} of {e['challenge']} by {e['owner']} "
                        f"was parked at stage {e['stage']} {how}: {e['reason']} (`vmjudge reasons {e['reason']}` "
                        f"says what it means and what to do). Once the cause is fixed, "
                        f"`vmjudge rescore {e['challenge']} --entries {entry_id} --rerun-stages` runs it again.", at,
                        kind="entry-parked")


def confirmation(db: Db, owner: str, address: str, subject: str, body: str, at: float) -> None:
    """Within the transaction that sets the owner's unconfirmed address: the one mail that
    carries its link (notify/confirm.py), to that address only. The sender drops it if the
    address has changed or been confirmed by the time it is sent (owners.py recipient)."""
    mail_as_written(db, CONFIRM, owner, address, subject, body, at)


def mail_as_written(db: Db, kind: str, owner: str, address: str, subject: str, body: str, at: float) -> None:
    """An owner's mail whose text is written with the event (notify/confirm.py's kinds: a
    confirmation, a sign-in link, an approval), to `address` only, which the sender checks is
    still the owner's as it sends (owners.py recipient)."""
    _insert(db, kind, OWNER, at, at, owner=owner, subject=subject, body=body, address=address)


def mails_to(db: Db, kind: str, address: str, since: float) -> list[float]:
    """When mails of `kind` to `address` (in any case) were written after `since`, oldest first:
    what the limits per address count, whichever account asked for them."""
    rows = db.execute("SELECT created FROM outbox WHERE kind = ? AND lower(address) = ? AND created > ? "
                      "ORDER BY created", (kind, address.lower(), since)).fetchall()
    return [float(r[0]) for r in rows]


def confirmations_since(db: Db, owner: str, since: float) -> list[float]:
    """When the owner's confirmation mails were written, after `since`, oldest first: what the
    portal's limit on them counts (owners.py)."""
    rows = db.execute("SELECT created FROM outbox WHERE kind = ? AND owner = ? AND created > ? ORDER BY created",
                      (CONFIRM, owner, since)).fetchall()
    return [float(r[0]) for r in rows]


def last_confirmation(database: Database, owner: str, address: str) -> OutboxRow | None:
    """The newest confirmation written for the owner's `address`, for its settings page."""
    with database.connect() as db:
        row = db.execute("SELECT * FROM outbox WHERE kind = ? AND owner = ? AND address = ? ORDER BY id DESC LIMIT 1",
                         (CONFIRM, owner, address)).fetchone()
    return None if row is None else OutboxRow.from_row(row)


def organiser_event(db: Db, condition: str, what: str, line: str, at: float | None = None,
                    kind: str | None = None) -> None:
    """Tell the organisers of `condition` (within the event's transaction): at once if it was not
    told in the last hour, else in the hour's one digest (created, or added to)."""
    at = time.time() if at is None else at
    db.lock(f"notify {condition}")
    last = db.execute("SELECT MAX(not_before) FROM outbox WHERE audience = ? AND condition = ?",
                      (ORGANISERS, condition)).fetchone()[0]
    if last is None or at >= float(last) + HOUR:
        _insert(db, kind or condition, ORGANISERS, at, at, condition=condition, subject=f"vmjudge: {line}"[:200],
                body=line)
        return
    added = db.execute("UPDATE outbox SET body = body || ?, events = events + 1, subject = ? WHERE id = (SELECT id "
                       "FROM outbox WHERE audience = ? AND condition = ? AND state = ? AND claimed_by IS NULL AND "
                       "tries = 0 AND not_before > ? ORDER BY id DESC LIMIT 1) RETURNING events",
                       (f"\n{stamp(at)} {line}", f"vmjudge: {what} (digest)", ORGANISERS, condition, PENDING,
                        at)).fetchone()
    if added is None:
        _insert(db, "digest", ORGANISERS, at, float(last) + HOUR, condition=condition,
                subject=f"vmjudge: {what} (digest)", body=f"{stamp(at)} {line}")


def claim(database: Database, host: str, hold: float, at: float | None = None) -> OutboxRow | None:
    """The oldest due message no one holds, now held by `host` for `hold` seconds and counted as
    a try (a sender killed mid-send used one); None when none is due. Several hosts claiming at
    once each get another row."""
    at = time.time() if at is None else at
    due = "state = ? AND next_try <= ? AND not_before <= ? AND (claim_until IS NULL OR claim_until < ?)"
    with database.connect() as db:  # a look first: an idle sender takes no write lock (SQLite has one)
        if db.execute(f"SELECT 1 FROM outbox WHERE {due} LIMIT 1", (PENDING, at, at, at)).fetchone() is None:
            return None
    with database.transaction() as db:
        row = db.execute("UPDATE outbox SET claimed_by = ?, claim_until = ?, tries = tries + 1 WHERE id = (SELECT id "
                         f"FROM outbox WHERE {due} ORDER BY id LIMIT 1" + database.dialect.skip_locked_row
                         + ") RETURNING *", (host, at + hold, PENDING, at, at, at)).fetchone()
    return None if row is None else OutboxRow.from_row(row)


def reached(database: Database, row: OutboxRow, host: str, delivered: tuple[str, ...]) -> bool:
    """Record the addresses reached so far; False if `host` no longer holds the row."""
    with database.transaction() as db:
        return db.execute("UPDATE outbox SET delivered = ? WHERE id = ? AND claimed_by = ?",
                          (json.dumps(list(delivered)), row.id, host)).rowcount == 1


def settle(database: Database, row: OutboxRow, host: str, state: str, error: str | None = None,
           next_try: float | None = None, tried: bool = True) -> bool:
    """End `host`'s hold on the row: `state` sent, failed or dropped (for good), or pending again
    from `next_try` (`tried` False: nothing was sent, the claim's try is given back). False if
    the hold had run out meanwhile (another sender owns the row now)."""
    with database.transaction() as db:
        return db.execute("UPDATE outbox SET state = ?, last_error = ?, next_try = COALESCE(?, next_try), "
                          "finished = ?, claimed_by = NULL, claim_until = NULL, tries = tries - ? "
                          "WHERE id = ? AND claimed_by = ?",
                          (state, error, next_try, None if state == PENDING else time.time(), 0 if tried else 1,
                           row.id, host)).rowcount == 1


def release_host(database: Database, host: str) -> int:
    """Give back the messages `host` holds, as its daemon starts: they were held by a daemon of
    that name that died mid-send (hosts.register refuses to start one while another of the name
    lives), and would otherwise wait for their hold to run out, minutes with the defaults, before
    any sender takes them again. Their try stays counted; how many were held."""
    with database.transaction() as db:
        return db.execute("UPDATE outbox SET claimed_by = NULL, claim_until = NULL WHERE state = ? AND claimed_by = ?",
                          (PENDING, host)).rowcount


def listing(database: Database, states: tuple[str, ...] = (), limit: int = 100) -> list[OutboxRow]:
    """The newest rows first, of `states` (all when empty)."""
    where = f" WHERE state IN ({','.join('?' * len(states))})" if states else ""
    with database.connect() as db:
        rows = db.execute(f"SELECT * FROM outbox{where} ORDER BY id DESC LIMIT ?", (*states, limit)).fetchall()
    return [OutboxRow.from_row(r) for r in rows]


def prune(database: Database, ended_before: float, at: float | None = None, dry_run: bool = False) -> int:
    """Remove (dry_run: count) the messages that ended (sent, failed or dropped) before
    `ended_before` ([retention] outbox_days, run by `vmjudge gc`). Never one pending: a message
    still to be sent, waiting for its publish time or held by a sender, is not finished. Nor one
    whose time is within the last hour, whatever the days: the once-an-hour rule
    (organiser_event) reads each condition's newest message, and pruning it would let the next
    event of that condition go out at once rather than in the hour's digest. Nor a confirmation
    or a sign-in link of the last day: the portal's daily limits on them count them (owners.py,
    accounts.py)."""
    at = time.time() if at is None else at
    where = (f"state IN ({','.join('?' * len(FINISHED))}) AND finished IS NOT NULL AND finished < ? "
             "AND not_before < ? AND (kind NOT IN (?, ?) OR created < ?)")
    args = (*FINISHED, ended_before, at - HOUR, CONFIRM, SIGNIN, at - DAY)
    with database.transaction() as db:
        if dry_run:
            return int(db.execute(f"SELECT COUNT(*) FROM outbox WHERE {where}", args).fetchone()[0])
        return db.execute(f"DELETE FROM outbox WHERE {where}", args).rowcount
