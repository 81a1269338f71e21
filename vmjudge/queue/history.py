"""What the queue keeps of an entry once it has run: its events, its archived stage-3 results
and scorings (re-scoring), what `vmjudge gc` may remove, and running it again.

A part of Queue (db.py), kept apart so that each file stays readable; it uses the same
database and transactions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..errors import VmjudgeError
from ..pipeline import FIRST
from .connection import Database, Db
from .requeue import event
from .rows import ArchivedResults, EntryRow, Scoring, now


def add_scoring(db: Db, s: Scoring) -> None:
    db.execute("INSERT INTO scorings (entry_id, at, why, scorer, scorer_version, reference_sha256, "
               "results_sha256, scores) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (s.entry_id, s.at or now(), s.why, s.scorer, s.scorer_version,
                s.reference_sha256, s.results_sha256, json.dumps(s.scores)))


def add_exam_results(db: Db, entry_id: int, run_id: int | None, sha256: str, manifest: dict[str, Any]) -> None:
    db.execute("INSERT INTO exam_results (entry_id, run_id, sha256, manifest, archived_at) VALUES (?, ?, ?, ?, ?)",
               (entry_id, run_id, sha256, json.dumps(manifest), now()))
    event(db, entry_id, "archived", f"stage 3 results sha256 {sha256}")


class History:
    database: Database

    def _connect(self) -> Any:
        return self.database.connect()

    def _transaction(self) -> Any:
        return self.database.transaction()

    # retention (`vmjudge gc`)

    # A finished entry and its last event; `gc`'s own events do not count, so that collecting
    # one kind of file does not put off collecting another.
    _IDLE = ("SELECT e.id, COALESCE(MAX(ev.at), e.submitted_at) AS last FROM entries e "
             "LEFT JOIN events ev ON ev.entry_id = e.id AND ev.kind != 'collected' "
             "WHERE e.state = 'done' {} GROUP BY e.id ORDER BY e.id")

    def finished_entries(self) -> dict[int, str]:
        """entry id -> the time of its last event, for every entry done (a parked one may still be
        run again from the stage it was parked at, which needs its home disk)."""
        with self._connect() as db:
            return {row["id"]: row["last"] for row in db.execute(self._IDLE.format(""))}

    def collect(self, entry_id: int, last_event: str, remove: Callable[[], list[str]]) -> list[str] | None:
        """Call `remove`, which deletes some of a finished entry's files and describes each it
        deleted, while holding the queue's write lock, so the entry cannot be queued again and
        claimed meanwhile; but only if it is still done with `last_event` as its last
        event. Each description goes into the entry's event log ("collected"). None when the
        entry has moved on (nothing was called)."""
        with self._transaction() as db:
            row = db.execute(self._IDLE.format("AND e.id = ?"), (entry_id,)).fetchone()
            if row is None or row["last"] != last_event:
                return None
            removed = remove()
            for detail in removed:
                event(db, entry_id, "collected", detail)
        return removed

    def events(self, entry_id: int) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute("SELECT at, kind, detail FROM events WHERE entry_id = ? ORDER BY id",
                              (entry_id,)).fetchall()
        return [dict(r) for r in rows]

    # archived stage-3 results and scorings (re-scoring)

    def add_exam_results(self, entry_id: int, run_id: int | None, sha256: str, manifest: dict[str, Any]) -> None:
        """Link archived results to an entry outside a stage (results of an older home)."""
        with self._transaction() as db:
            add_exam_results(db, entry_id, run_id, sha256, manifest)

    def exam_results(self, entry_id: int) -> ArchivedResults | None:
        """The entry's latest archived stage-3 results; None when it never passed stage 3."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM exam_results WHERE entry_id = ? ORDER BY id DESC LIMIT 1",
                             (entry_id,)).fetchone()
        return ArchivedResults.from_row(row) if row is not None else None

    def latest_exam_results(self, challenge: str) -> dict[int, ArchivedResults]:
        """entry id -> latest archived results, for every entry of `challenge` that has some."""
        with self._connect() as db:
            rows = db.execute("SELECT r.* FROM exam_results r JOIN entries e ON e.id = r.entry_id "
                              "WHERE e.challenge = ? ORDER BY r.id", (challenge,)).fetchall()
        return {row["entry_id"]: ArchivedResults.from_row(row) for row in rows}

    def scorings(self, entry_id: int) -> list[Scoring]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM scorings WHERE entry_id = ? ORDER BY id", (entry_id,)).fetchall()
        return [Scoring.from_row(r) for r in rows]

    def record_rescores(self, scorings: list[Scoring]) -> list[int]:
        """Record re-scorings in one transaction: each becomes its entry's current scores, the
        earlier ones stay in the history. An entry that is no longer done and scored (put back
        in the queue meanwhile) is left alone; returns the ids that were recorded."""
        recorded = []
        with self._transaction() as db:
            stamp = now()
            for s in scorings:
                cur = db.execute("UPDATE entries SET scores = ? WHERE id = ? AND state = 'done' AND outcome = 'scored'",
                                 (json.dumps(s.scores), s.entry_id))
                if cur.rowcount != 1:
                    continue
                add_scoring(db, replace(s, at=stamp))
                event(db, s.entry_id, "rescored", f"{s.scorer_version} reference {s.reference_sha256[:12]} "
                            f"results {s.results_sha256[:12]}: {json.dumps(s.scores, sort_keys=True)}")
                recorded.append(s.entry_id)
        return recorded

    def rerun(self, entry_id: int) -> EntryRow:
        """Queue an entry again from stage 1 as a new evaluation, as the organiser's batch work
        (fair share runs it only when no participant's stage is ready); its earlier stage runs,
        archived results and scorings stay. Refused while the entry is queued or running."""
        with self._transaction() as db:
            row = db.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                raise VmjudgeError(f"there is no entry {entry_id}: `vmjudge status` lists the entries.")
            if row["state"] in ("queued", "running"):
                raise VmjudgeError(f"entry {entry_id} is {row['state']} (stage {row['stage']}): wait until the "
                                   "daemon has finished it, then run it again.")
            evaluation = row["evaluation"] + 1
            again = db.execute("UPDATE entries SET state = 'queued', stage = ?, lease_owner = NULL, lease_run = NULL, "
                               "lease_until = NULL, home_host = NULL, not_before = 0, exam = NULL, evaluation = ?, "
                               "batch = 1, exam_started = NULL, published = NULL WHERE id = ? RETURNING *",
                               (FIRST, evaluation, entry_id)).fetchone()
            event(db, entry_id, "rerun", f"queued again from stage 1 as evaluation {evaluation}")
        return EntryRow.from_row(again)

    def resume_held(self, entry_id: int) -> bool:
        """Queue again at stage 4 an entry held there (parked: the challenge's scorer or reference failed on
        its results), once they are fixed: it is scored from its archived results, its earlier runs kept.
        False when the entry is not held at stage 4."""
        with self._transaction() as db:
            row = db.execute("UPDATE entries SET state = 'queued', reason = NULL, lease_owner = NULL, "
                             "lease_run = NULL, lease_until = NULL, not_before = 0, published = NULL WHERE id = ? AND "
                             "state = 'parked' AND stage = 'score' RETURNING id", (entry_id,)).fetchone()
            if row is not None:
                event(db, entry_id, "resumed", "queued again at stage 4, its scorer or reference fixed")
        return row is not None
