"""The durable queue: SQLite in WAL mode under the site's home.

An entry row is committed only after its archive is in the spool (fsynced), so an id that
`submit` printed always has its archive. Every change of state goes through one short
transaction here, and every one is also appended to the event log. Connections are opened
per operation (connection.py), so the daemon's slot threads never share one. The tables are in schema.py,
the records returned in rows.py and the retry policy applied in retry.py.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import VmjudgeError
from ..pipeline import FIRST, PIPELINE
from .connection import connect, create, transaction
from .gpu_slots import GpuSlots
from .retry import after_infra_failure
from .rows import ArchivedResults, EntryRow, Scoring, StageRun, now

# A stage needs a GPU slot when its challenge asks for a GPU and it runs in a VM (stage 4,
# on the host, needs none: a GPU challenge's scoring never waits for a card).
_VM_STAGES = tuple(s.name for s in PIPELINE if s.in_vm)
_NEEDS_GPU = f"(c.gpu IS NOT NULL AND e.stage IN ({', '.join(repr(n) for n in _VM_STAGES)}))"


def _slot_filter(gpu: tuple[str, ...] | None) -> tuple[str, tuple[str, ...]]:
    """SQL (on entries e joined with challenges c) for what one kind of slot may take: a CPU
    slot (gpu None) every stage that needs no GPU, and nothing else, so a CPU slot never runs
    GPU work and GPU work never waits behind CPU work in a GPU slot; a GPU slot only stages
    that need a GPU, of a model among `gpu` ("any", "t4")."""
    if gpu is None:
        return f" AND NOT {_NEEDS_GPU}", ()
    return f" AND {_NEEDS_GPU} AND c.gpu IN ({','.join('?' * len(gpu))})", gpu


class Queue:
    def __init__(self, path: Path):
        self.path = Path(path)
        create(self.path)
        self.gpu_slots = GpuSlots(self.path)

    def _event(self, db: sqlite3.Connection, entry_id: int | None, kind: str, detail: str) -> None:
        db.execute("INSERT INTO events (entry_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                   (entry_id, now(), kind, detail))

    # challenges

    def add_challenge(self, name: str, directory: Path, image_key: str, gpu: str | None = None) -> None:
        """Register (or register again) a challenge; `gpu` is its [vm] gpu, which decides the
        slots its stages may take."""
        with transaction(self.path) as db:
            db.execute("INSERT INTO challenges (name, directory, image_key, registered_at, gpu) VALUES (?, ?, ?, ?, ?) "
                       "ON CONFLICT(name) DO UPDATE SET directory = excluded.directory, "
                       "image_key = excluded.image_key, gpu = excluded.gpu", (name, str(directory), image_key, now(),
                                                                              gpu))
            self._event(db, None, "challenge", f"registered {name} from {directory}" + (f", GPU {gpu}" if gpu else ""))

    def challenge_dir(self, name: str) -> Path:
        with connect(self.path) as db:
            row = db.execute("SELECT directory FROM challenges WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise VmjudgeError(f"no challenge named {name!r} is registered: run `vmjudge challenge add DIR` first.")
        return Path(row["directory"])

    # entries

    def add_entry(self, challenge: str, owner: str, late: bool, sha256: str, name: str, path: Path,
                  dry_run: bool = False) -> int:
        with transaction(self.path) as db:
            cur = db.execute(
                "INSERT INTO entries (challenge, owner, late, dry_run, archive_sha256, archive_name, archive_path, "
                "submitted_at, state, stage) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?)",
                (challenge, owner, int(late), int(dry_run), sha256, name, str(path), now(), FIRST))
            assert cur.lastrowid is not None  # an INSERT sets it
            entry_id = cur.lastrowid
            self._event(db, entry_id, "submitted", f"{name} sha256 {sha256} by {owner}")
        return entry_id

    def entry(self, entry_id: int) -> EntryRow:
        with connect(self.path) as db:
            row = db.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise VmjudgeError(f"there is no entry {entry_id}: `vmjudge status` lists the entries.")
        return EntryRow.from_row(row)

    def owner_usage(self, challenge: str, owner: str, late: bool) -> tuple[int, int]:
        """(scored, pending) entries of `owner` on one board of `challenge`, for the entry limit.

        Pending ones are queued or running and may yet be scored, so they count until they end
        otherwise; a declared dry run never can be scored and never counts. Failed, dry-run and
        parked entries do not count."""
        with connect(self.path) as db:
            row = db.execute(
                "SELECT COALESCE(SUM(state = 'done' AND outcome = 'scored'), 0) AS scored, "
                "COALESCE(SUM(state IN ('queued', 'running') AND dry_run = 0), 0) AS pending "
                "FROM entries WHERE challenge = ? AND owner = ? AND late = ?",
                (challenge, owner, int(late))).fetchone()
        return int(row["scored"]), int(row["pending"])

    def entries(self, states: tuple[str, ...] | None = None) -> list[EntryRow]:
        with connect(self.path) as db:
            if states:
                marks = ",".join("?" * len(states))
                rows = db.execute(f"SELECT * FROM entries WHERE state IN ({marks}) ORDER BY id", states).fetchall()
            else:
                rows = db.execute("SELECT * FROM entries ORDER BY id").fetchall()
        return [EntryRow.from_row(r) for r in rows]

    def claim_next(self, owner: str, only: int | None = None, gpu: tuple[str, ...] | None = None) -> EntryRow | None:
        """The oldest queued entry that a slot of this kind may run (gpu: None for a CPU slot,
        else the GPU models the slot's card answers to), now marked running under `owner`;
        None when nothing such waits."""
        where, args = _slot_filter(gpu)
        with transaction(self.path) as db:
            sql = ("SELECT e.* FROM entries e JOIN challenges c ON c.name = e.challenge "
                   "WHERE e.state = 'queued' AND e.not_before <= ?" + where + (" AND e.id = ?" if only else "")
                   + " ORDER BY e.id LIMIT 1")
            row = db.execute(sql, (time.time(), *args) + ((only,) if only else ())).fetchone()
            if row is None:
                return None
            db.execute("UPDATE entries SET state = 'running', lease_owner = ? WHERE id = ?", (owner, row["id"]))
            self._event(db, row["id"], "running", f"{row['stage']} by {owner}")
        return self.entry(row["id"])

    def waiting(self, only: int | None = None, gpu: tuple[str, ...] | None = None) -> bool:
        """Whether any entry is queued (ready or waiting out a retry delay) that this host can
        run: every stage that needs no GPU, and GPU stages of the models in `gpu` (the ones
        its GPU slots in service answer to)."""
        cpu_where, _ = _slot_filter(None)
        gpu_where, args = _slot_filter(gpu) if gpu else (" AND 0", ())
        with connect(self.path) as db:
            sql = ("SELECT 1 FROM entries e JOIN challenges c ON c.name = e.challenge WHERE e.state = 'queued'"
                   + (" AND e.id = ?" if only else "") + f" AND ((1{cpu_where}) OR (1{gpu_where})) LIMIT 1")
            return db.execute(sql, ((only,) if only else ()) + args).fetchone() is not None

    def waiting_for_gpu(self) -> dict[str, int]:
        """GPU model -> queued stages that need it: what the daemon says when no slot can run them."""
        with connect(self.path) as db:
            rows = db.execute("SELECT c.gpu AS gpu, COUNT(*) AS n FROM entries e JOIN challenges c "
                              f"ON c.name = e.challenge WHERE e.state = 'queued' AND {_NEEDS_GPU} "
                              "GROUP BY c.gpu").fetchall()
        return {r["gpu"]: r["n"] for r in rows}

    def requeue_running(self) -> list[int]:
        """After a daemon died: its running stages go back to the queue, to be run again."""
        with transaction(self.path) as db:
            ids = [r["id"] for r in db.execute("SELECT id FROM entries WHERE state = 'running'").fetchall()]
            for entry_id in ids:
                db.execute("UPDATE entries SET state = 'queued', lease_owner = NULL WHERE id = ?", (entry_id,))
                db.execute("UPDATE stage_runs SET finished_at = ?, status = 'infra', reason = 'daemon-stopped', "
                           "message = 'the daemon stopped while this stage ran' "
                           "WHERE entry_id = ? AND finished_at IS NULL", (now(), entry_id))
                self._event(db, entry_id, "requeued", "the daemon stopped while this stage ran")
        return ids

    # stage runs

    def start_stage(self, entry_id: int, stage: str, host: str, slot: int) -> StageRun:
        with transaction(self.path) as db:
            attempt = 1 + db.execute("SELECT COUNT(*) FROM stage_runs WHERE entry_id = ? AND stage = ?",
                                     (entry_id, stage)).fetchone()[0]
            evaluation = db.execute("SELECT evaluation FROM entries WHERE id = ?", (entry_id,)).fetchone()[0]
            cur = db.execute("INSERT INTO stage_runs (entry_id, stage, attempt, host, slot, started_at, evaluation) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (entry_id, stage, attempt, host, slot, now(), evaluation))
            assert cur.lastrowid is not None  # an INSERT sets it
            run_id = cur.lastrowid
        return self.stage_run(run_id)

    def stage_run(self, run_id: int) -> StageRun:
        with connect(self.path) as db:
            return StageRun.from_row(db.execute("SELECT * FROM stage_runs WHERE id = ?", (run_id,)).fetchone())

    def stage_runs(self, entry_id: int) -> list[StageRun]:
        with connect(self.path) as db:
            rows = db.execute("SELECT * FROM stage_runs WHERE entry_id = ? ORDER BY id", (entry_id,)).fetchall()
        return [StageRun.from_row(r) for r in rows]

    def finish_stage(self, run: StageRun, status: str, message: str, manifest: dict[str, Any],
                     reason: str | None = None, next_stage: str | None = None,
                     outcome: str | None = None, scores: dict[str, float] | None = None,
                     exam: dict[str, int] | None = None, results_sha256: str | None = None,
                     scoring: Scoring | None = None) -> None:
        """Record a stage's result and move the entry on: to `next_stage`, or to done with `outcome`.
        `results_sha256`: stage 3's archived results, linked to the entry in the same transaction;
        `scoring`: stage 4's official scoring, added to the entry's history."""
        with transaction(self.path) as db:
            db.execute("UPDATE stage_runs SET finished_at = ?, status = ?, reason = ?, message = ?, manifest = ? "
                       "WHERE id = ?", (now(), status, reason, message, json.dumps(manifest), run.id))
            if exam is not None:
                db.execute("UPDATE entries SET exam = ? WHERE id = ?", (json.dumps(exam), run.entry_id))
            if results_sha256 is not None:
                self._add_exam_results(db, run.entry_id, run.id, results_sha256, manifest)
            if scoring is not None:
                self._add_scoring(db, scoring)
            if next_stage is not None:
                db.execute("UPDATE entries SET state = 'queued', stage = ?, lease_owner = NULL WHERE id = ?",
                           (next_stage, run.entry_id))
                self._event(db, run.entry_id, "stage", f"{run.stage} {status}; next {next_stage}")
            else:
                failed_stage = run.stage if outcome == "failed" else None
                db.execute("UPDATE entries SET state = 'done', stage = NULL, lease_owner = NULL, outcome = ?, "
                           "failed_stage = ?, reason = ?, scores = ?, finished_at = ? WHERE id = ?",
                           (outcome, failed_stage, reason, json.dumps(scores) if scores is not None else None,
                            now(), run.entry_id))
                self._event(db, run.entry_id, "done", f"{run.stage} {status}: {outcome} {reason or ''}".strip())

    def infra_failure(self, run: StageRun, reason: str, message: str, manifest: dict[str, Any]) -> bool:
        """Record an infrastructure failure; the stage is queued again, after a delay, or the
        entry is parked for the organiser, as the retry policy (retry.py) decides. True if requeued."""
        with transaction(self.path) as db:
            db.execute("UPDATE stage_runs SET finished_at = ?, status = 'infra', reason = ?, message = ?, "
                       "manifest = ? WHERE id = ?", (now(), reason, message, json.dumps(manifest), run.id))
            failures = db.execute("SELECT COUNT(*) FROM stage_runs WHERE entry_id = ? AND stage = ? AND "
                                  "evaluation = ? AND status = 'infra'",
                                  (run.entry_id, run.stage, run.evaluation)).fetchone()[0]
            retry = after_infra_failure(failures)
            db.execute("UPDATE entries SET state = ?, lease_owner = NULL, reason = ?, not_before = ? WHERE id = ?",
                       ("queued" if retry.again else "parked", None if retry.again else reason,
                        time.time() + retry.delay, run.entry_id))
            self._event(db, run.entry_id, "infra", f"{run.stage} attempt {run.attempt}: {reason}: {message}"
                        + ("" if retry.again else f" (parked after {failures} failures)"))
        return retry.again

    def cancel_stage(self, run: StageRun) -> None:
        """The daemon stopped on purpose while this stage ran: queue it again, uncounted."""
        with transaction(self.path) as db:
            db.execute("UPDATE stage_runs SET finished_at = ?, status = 'cancelled', reason = 'daemon-stopping', "
                       "message = 'the daemon was stopped while this stage ran' WHERE id = ?", (now(), run.id))
            db.execute("UPDATE entries SET state = 'queued', lease_owner = NULL WHERE id = ?", (run.entry_id,))
            self._event(db, run.entry_id, "requeued", f"{run.stage}: the daemon was stopped; it will run again")

    # retention (`vmjudge gc`)

    # A finished entry and its last event; `gc`'s own events do not count, so that collecting
    # one kind of file does not put off collecting another.
    _IDLE = ("SELECT e.id, COALESCE(MAX(ev.at), e.submitted_at) AS last FROM entries e "
             "LEFT JOIN events ev ON ev.entry_id = e.id AND ev.kind != 'collected' "
             "WHERE e.state = 'done' {} GROUP BY e.id ORDER BY e.id")

    def finished_entries(self) -> dict[int, str]:
        """entry id -> the time of its last event, for every entry done (a parked one may still be
        run again from the stage it was parked at, which needs its home disk)."""
        with connect(self.path) as db:
            return {row["id"]: row["last"] for row in db.execute(self._IDLE.format(""))}

    def collect(self, entry_id: int, last_event: str, remove: Callable[[], list[str]]) -> list[str] | None:
        """Call `remove`, which deletes some of a finished entry's files and describes each it
        deleted, while holding the queue's write lock, so the entry cannot be queued again and
        claimed meanwhile; but only if it is still done with `last_event` as its last
        event. Each description goes into the entry's event log ("collected"). None when the
        entry has moved on (nothing was called)."""
        with transaction(self.path) as db:
            row = db.execute(self._IDLE.format("AND e.id = ?"), (entry_id,)).fetchone()
            if row is None or row["last"] != last_event:
                return None
            removed = remove()
            for detail in removed:
                self._event(db, entry_id, "collected", detail)
        return removed

    def events(self, entry_id: int) -> list[dict[str, Any]]:
        with connect(self.path) as db:
            rows = db.execute("SELECT at, kind, detail FROM events WHERE entry_id = ? ORDER BY id",
                              (entry_id,)).fetchall()
        return [dict(r) for r in rows]

    # archived stage-3 results and scorings (re-scoring)

    def _add_scoring(self, db: sqlite3.Connection, s: Scoring) -> None:
        db.execute("INSERT INTO scorings (entry_id, at, why, scorer, scorer_version, reference_sha256, "
                   "results_sha256, scores) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (s.entry_id, s.at or now(), s.why, s.scorer, s.scorer_version,
                    s.reference_sha256, s.results_sha256, json.dumps(s.scores)))

    def _add_exam_results(self, db: sqlite3.Connection, entry_id: int, run_id: int | None, sha256: str,
                          manifest: dict[str, Any]) -> None:
        db.execute("INSERT INTO exam_results (entry_id, run_id, sha256, manifest, archived_at) VALUES (?, ?, ?, ?, ?)",
                   (entry_id, run_id, sha256, json.dumps(manifest), now()))
        self._event(db, entry_id, "archived", f"stage 3 results sha256 {sha256}")

    def add_exam_results(self, entry_id: int, run_id: int | None, sha256: str, manifest: dict[str, Any]) -> None:
        """Link archived results to an entry outside a stage (results of an older home)."""
        with transaction(self.path) as db:
            self._add_exam_results(db, entry_id, run_id, sha256, manifest)

    def exam_results(self, entry_id: int) -> ArchivedResults | None:
        """The entry's latest archived stage-3 results; None when it never passed stage 3."""
        with connect(self.path) as db:
            row = db.execute("SELECT * FROM exam_results WHERE entry_id = ? ORDER BY id DESC LIMIT 1",
                             (entry_id,)).fetchone()
        return ArchivedResults.from_row(row) if row is not None else None

    def latest_exam_results(self, challenge: str) -> dict[int, ArchivedResults]:
        """entry id -> latest archived results, for every entry of `challenge` that has some."""
        with connect(self.path) as db:
            rows = db.execute("SELECT r.* FROM exam_results r JOIN entries e ON e.id = r.entry_id "
                              "WHERE e.challenge = ? ORDER BY r.id", (challenge,)).fetchall()
        return {row["entry_id"]: ArchivedResults.from_row(row) for row in rows}

    def scorings(self, entry_id: int) -> list[Scoring]:
        with connect(self.path) as db:
            rows = db.execute("SELECT * FROM scorings WHERE entry_id = ? ORDER BY id", (entry_id,)).fetchall()
        return [Scoring.from_row(r) for r in rows]

    def record_rescores(self, scorings: list[Scoring]) -> list[int]:
        """Record re-scorings in one transaction: each becomes its entry's current scores, the
        earlier ones stay in the history. An entry that is no longer done and scored (put back
        in the queue meanwhile) is left alone; returns the ids that were recorded."""
        recorded = []
        with transaction(self.path) as db:
            stamp = now()
            for s in scorings:
                cur = db.execute("UPDATE entries SET scores = ? WHERE id = ? AND state = 'done' AND outcome = 'scored'",
                                 (json.dumps(s.scores), s.entry_id))
                if cur.rowcount != 1:
                    continue
                self._add_scoring(db, replace(s, at=stamp))
                self._event(db, s.entry_id, "rescored", f"{s.scorer_version} reference {s.reference_sha256[:12]} "
                            f"results {s.results_sha256[:12]}: {json.dumps(s.scores, sort_keys=True)}")
                recorded.append(s.entry_id)
        return recorded

    def rerun(self, entry_id: int) -> EntryRow:
        """Queue an entry again from stage 1 as a new evaluation; its earlier stage runs,
        archived results and scorings stay. Refused while the entry is queued or running."""
        with transaction(self.path) as db:
            row = db.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                raise VmjudgeError(f"there is no entry {entry_id}: `vmjudge status` lists the entries.")
            if row["state"] in ("queued", "running"):
                raise VmjudgeError(f"entry {entry_id} is {row['state']} (stage {row['stage']}): wait until the "
                                   "daemon has finished it, then run it again.")
            evaluation = row["evaluation"] + 1
            db.execute("UPDATE entries SET state = 'queued', stage = ?, lease_owner = NULL, not_before = 0, "
                       "exam = NULL, evaluation = ? WHERE id = ?", (FIRST, evaluation, entry_id))
            self._event(db, entry_id, "rerun", f"queued again from stage 1 as evaluation {evaluation}")
        return self.entry(entry_id)
