"""What the queue keeps of a contest's phases: the owners the organiser promoted into a phase,
and when a phase was published. Both are the organiser's acts, so each is recorded with who did
it and when, once: promoting an owner again keeps the first record, and a phase is published
once (participants may have read it since; it is not taken back).

With several hosts, every portal and command reads the same rows, so a phase is published on
all of them at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..errors import VmjudgeError
from .connection import Database
from .requeue import event
from .rows import stamp


@dataclass(frozen=True)
class Promotion:
    challenge: str
    phase: str
    owner: str
    place: int | None  # the owner's rank on the board promoted from; None when chosen by name
    how: str  # "top 2 of validation" or "chosen by the organisers"
    by: str
    at: str

    @classmethod
    def from_row(cls, row: Any) -> Promotion:
        return cls(row["challenge"], row["phase"], row["owner"], row["place"], row["how"], row["promoted_by"],
                   row["promoted_at"])


@dataclass(frozen=True)
class Publication:
    challenge: str
    phase: str
    by: str
    at: str
    seconds: float  # epoch seconds: participants see the phase in full from then

    @classmethod
    def from_row(cls, row: Any) -> Publication:
        return cls(row["challenge"], row["phase"], row["published_by"], row["published_at"], float(row["at"]))


class PhaseRecords:
    def __init__(self, database: Database):
        self.database = database

    def promote(self, challenge: str, phase: str, owners: list[tuple[str, int | None]], how: str,
                by: str) -> list[Promotion]:
        """Promote each (owner, place) into `phase`, in one transaction; returns the promotions
        made now (an owner promoted before keeps the earlier record and is left out)."""
        made = []
        at = stamp(time.time())
        with self.database.transaction() as db:
            for owner, place in owners:
                row = db.execute("INSERT INTO promotions (challenge, phase, owner, place, how, promoted_by, "
                                 "promoted_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (challenge, phase, owner) "
                                 "DO NOTHING RETURNING *", (challenge, phase, owner, place, how, by, at)).fetchone()
                if row is not None:
                    made.append(Promotion.from_row(row))
                    event(db, None, "promoted", f"{owner} into {challenge} phase {phase} ({how}) by {by}")
        return made

    def promotions(self, challenge: str, phase: str | None = None) -> list[Promotion]:
        """The promotions into `phase` (every phase when None), by place, then in the order made."""
        where, args = ("challenge = ? AND phase = ?", (challenge, phase)) if phase else ("challenge = ?", (challenge,))
        with self.database.connect() as db:
            rows = db.execute(f"SELECT * FROM promotions WHERE {where} ORDER BY phase, promoted_at, "
                              "COALESCE(place, 1000000000), owner", args).fetchall()
        return [Promotion.from_row(r) for r in rows]

    def publish(self, challenge: str, phase: str, by: str) -> Publication:
        """Publish `phase` now; refused if it was published before."""
        at = time.time()
        with self.database.transaction() as db:
            row = db.execute("INSERT INTO publications (challenge, phase, published_by, published_at, at) "
                             "VALUES (?, ?, ?, ?, ?) ON CONFLICT (challenge, phase) DO NOTHING RETURNING *",
                             (challenge, phase, by, stamp(at), at)).fetchone()
            if row is None:
                before = Publication.from_row(db.execute("SELECT * FROM publications WHERE challenge = ? AND "
                                                         "phase = ?", (challenge, phase)).fetchone())
                raise VmjudgeError(f"phase {phase} of {challenge} was published already, at {before.at} by "
                                   f"{before.by}: a publication is not taken back or made twice.")
            event(db, None, "published", f"{challenge} phase {phase} by {by}")
        return Publication.from_row(row)

    def publications(self, challenge: str | None = None) -> dict[tuple[str, str], Publication]:
        """(challenge, phase) -> its publication, for every published phase (of `challenge`)."""
        where, args = ("WHERE challenge = ?", (challenge,)) if challenge else ("", ())
        with self.database.connect() as db:
            rows = db.execute(f"SELECT * FROM publications {where}", args).fetchall()
        return {(r["challenge"], r["phase"]): Publication.from_row(r) for r in rows}
