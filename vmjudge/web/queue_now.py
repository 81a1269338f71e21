"""The organiser's "Queue now" page: what each slot is running and who is waiting, read from the
queue as `vmjudge status` reads it, so an organiser sees at a glance whether one owner's entries
fill the queue or a host's slots sit idle."""

from __future__ import annotations

from dataclasses import dataclass

from ..queue.db import Queue
from ..queue.rows import EntryRow


@dataclass(frozen=True)
class Running:
    host: str
    slot: int
    entry: EntryRow
    stage: str
    since: str


@dataclass(frozen=True)
class Waiting:
    owner: str
    entries: list[EntryRow]  # oldest first

    @property
    def stages(self) -> str:
        counts: dict[str, int] = {}
        for e in self.entries:
            counts[e.stage or "?"] = counts.get(e.stage or "?", 0) + 1
        return ", ".join(f"{n} at {stage}" for stage, n in counts.items())


@dataclass(frozen=True)
class QueueNow:
    running: list[Running]
    waiting: list[Waiting]  # the owner with the most entries waiting first
    parked: int


def queue_now(queue: Queue) -> QueueNow:
    running = []
    for e in queue.entries(("running",)):
        runs = [r for r in queue.stage_runs(e.id) if r.finished_at is None]
        if runs:  # the run holding the entry now (one unfinished run a claim)
            r = runs[-1]
            running.append(Running(r.host, r.slot, e, r.stage, r.started_at))
    owners: dict[str, list[EntryRow]] = {}
    for e in queue.entries(("queued",)):
        owners.setdefault(e.owner, []).append(e)
    waiting = sorted((Waiting(o, sorted(es, key=lambda e: e.id)) for o, es in owners.items()),
                     key=lambda w: (-len(w.entries), w.owner))
    return QueueNow(sorted(running, key=lambda r: (r.host, r.slot)), waiting, len(queue.entries(("parked",))))
