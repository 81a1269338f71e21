"""Claims that outlive their host, and entries whose home disk is on a host that is gone.

A claim holds its entry until `lease_until`, which the claiming daemon's heartbeat moves on
while the stage runs. Every daemon sweeps: a claim whose lease has run out belongs to a host
that died or lost the database, so its stage is queued again, as the infrastructure's failure
(the entry pays nothing; the retry policy still parks an entry that takes down every host
that runs it). Stages 2 and 3 run on the post-setup home disk, which only the host that ran
prep has; when that host has not heartbeated for a grace period, the entry starts again from
stage 1 on whichever host takes it. A host that comes back after its stages were taken
records nothing: its stage runs no longer hold their entries (Queue._hold).
"""

from __future__ import annotations

import time

from ..pipeline import FIRST, HOME_STAGES
from .connection import Database
from .requeue import event, requeue_or_park
from .rows import stamp


class Leases:
    def __init__(self, database: Database):
        self.database = database

    def renew(self, host: str, lease: float) -> None:
        """Every claim of `host` holds for `lease` seconds more."""
        with self.database.transaction() as db:
            db.execute("UPDATE entries SET lease_until = ? WHERE state = 'running' AND lease_owner = ?",
                       (time.time() + lease, host))

    def expire(self) -> list[int]:
        """Queue again (or park) every stage whose claim's lease has run out; their ids."""
        dialect = self.database.dialect
        with self.database.transaction() as db:
            rows = db.execute("SELECT e.id, e.stage, e.evaluation, e.lease_owner, e.lease_run, e.lease_until "
                              "FROM entries e WHERE e.state = 'running' AND e.lease_until < ? ORDER BY e.id"
                              + dialect.skip_locked, (time.time(),)).fetchall()
            for r in rows:
                attempt = db.execute("SELECT attempt FROM stage_runs WHERE id = ?", (r["lease_run"],)).fetchone()
                requeue_or_park(db, r["id"], r["stage"], r["evaluation"], r["lease_run"],
                                attempt[0] if attempt else 0, reason="host-lost",
                                message=f"the host {r['lease_owner']} running this stage stopped renewing its claim "
                                f"(lease ran out at {stamp(r['lease_until'])})",
                                manifest={"stage": r["stage"], "host": r["lease_owner"]})
        return [int(r["id"]) for r in rows]

    def restart_lost_homes(self, grace: float) -> list[int]:
        """Entries queued for a stage on a home disk whose host has not heartbeated for `grace`
        seconds (or never registered) start again from stage 1 elsewhere; their ids."""
        marks = ",".join("?" * len(HOME_STAGES))
        with self.database.transaction() as db:
            rows = db.execute(
                "SELECT e.id, e.stage, e.home_host FROM entries e LEFT JOIN hosts h ON h.name = e.home_host "
                f"WHERE e.state = 'queued' AND e.stage IN ({marks}) AND e.home_host IS NOT NULL "
                "AND (h.name IS NULL OR h.heartbeat < ?) ORDER BY e.id" + self.database.dialect.skip_locked,
                (*HOME_STAGES, time.time() - grace)).fetchall()
            for r in rows:
                db.execute("UPDATE entries SET stage = ?, home_host = NULL, not_before = 0 WHERE id = ?",
                           (FIRST, r["id"]))
                event(db, r["id"], "home-lost", f"the host {r['home_host']} that holds its home disk for stage "
                      f"{r['stage']} has been gone for over {grace:.0f} s: it starts again from stage 1")
        return [int(r["id"]) for r in rows]
