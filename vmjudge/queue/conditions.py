"""Organisers' conditions that begin and end (issue 35): another host down and back, a daemon
stopped by an error and running again, the home's disk short of space and freed. Each one's
state as last told is kept in notify_conditions, so a condition is told when it begins and
again when it is over ("back to normal"), never at every heartbeat that still sees it; with
several hosts watching, the check and the message are one transaction under one lock, so one
host tells it.
"""

from __future__ import annotations

import time

from .connection import Database, Db
from .outbox import organiser_event
from .rows import stamp

DOWN, UP, STOPPED, ERROR, RUNNING = "down", "up", "stopped", "error", "running"


def _told(db: Db, condition: str) -> str | None:
    row = db.execute("SELECT state FROM notify_conditions WHERE name = ?", (condition,)).fetchone()
    return None if row is None else row["state"]


def _record(db: Db, condition: str, state: str, at: float) -> None:
    db.execute("INSERT INTO notify_conditions (name, state, changed) VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE "
               "SET state = excluded.state, changed = excluded.changed", (condition, state, at))


def watch_hosts(database: Database, me: str, lease: float, at: float | None = None) -> list[str]:
    """Tell the organisers of each other host gone silent for longer than a lease, and of each
    such host heard again; the names told of. A host stopped on purpose is not down."""
    at = time.time() if at is None else at
    told = []
    with database.transaction() as db:
        db.lock("notify hosts")
        for r in db.execute("SELECT name, heartbeat, stopped FROM hosts WHERE name != ? ORDER BY name",
                            (me,)).fetchall():
            name, condition = r["name"], f"host {r['name']}"
            state = STOPPED if r["stopped"] else (DOWN if at - float(r["heartbeat"]) > lease else UP)
            before = _told(db, condition)
            if state == before or (before is None and state != DOWN):
                if before is None:
                    _record(db, condition, state, at)
                continue
            if state == DOWN:
                organiser_event(db, condition, f"host {name}", f"Host {name} has not been heard from since "
                                f"{stamp(float(r['heartbeat']))} (more than its lease of {lease:g} s): its stages "
                                "are queued again for the other hosts; see `vmjudge status`.", at, kind="host-down")
                told.append(name)
            elif before == DOWN:
                back = "is back: its daemon is heard again" if state == UP else "was stopped on purpose"
                organiser_event(db, condition, f"host {name}", f"Host {name} {back}.", at, kind="host-back")
                told.append(name)
            _record(db, condition, state, at)
    return told


def daemon_failed(database: Database, host: str, error: str, at: float | None = None) -> None:
    """The daemon of `host` is stopping because of an error (not asked to): tell the organisers."""
    at = time.time() if at is None else at
    condition = f"daemon {host}"
    with database.transaction() as db:
        organiser_event(db, condition, f"the daemon of {host}", f"The vmjudge daemon of {host} stopped because of "
                        f"an error: {error}. Its running stages go back to the queue; start it again once the cause "
                        "is fixed (`journalctl -u vmjudge` holds its log).", at, kind="daemon-stopped")
        _record(db, condition, ERROR, at)


def daemon_started(database: Database, host: str, at: float | None = None) -> None:
    """The daemon of `host` runs: if it last stopped because of an error, say it is back."""
    at = time.time() if at is None else at
    condition = f"daemon {host}"
    with database.transaction() as db:
        if _told(db, condition) == ERROR:
            organiser_event(db, condition, f"the daemon of {host}", f"The vmjudge daemon of {host} runs again.", at,
                            kind="daemon-back")
            _record(db, condition, RUNNING, at)


def watch_disk(database: Database, host: str, free_percent: float, threshold: float, what: str,
               at: float | None = None) -> bool:
    """Tell the organisers when `what` (the home's disk of `host`) has less than `threshold` %
    free, and when it has enough again; whether a message was written."""
    at = time.time() if at is None else at
    condition = f"disk {host}"
    state = "low" if free_percent < threshold else "ok"
    with database.transaction() as db:
        before = _told(db, condition)
        if state == before or (before is None and state == "ok"):
            if before is None:
                _record(db, condition, state, at)
            return False
        if state == "low":
            line = (f"{what} on {host} has {free_percent:.1f} % free, below the {threshold:g} % of [notify] "
                    "disk_free_percent: free space (`vmjudge gc` removes what finished entries no longer need).")
        else:
            line = f"{what} on {host} has {free_percent:.1f} % free again."
        organiser_event(db, condition, f"{what} on {host}", line, at, kind=f"disk-{state}")
        _record(db, condition, state, at)
    return True
