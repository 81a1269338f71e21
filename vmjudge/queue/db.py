"""The durable queue: SQLite in WAL mode under the site's home, or PostgreSQL shared by
several hosts (connection.py opens either; dialect.py holds the little SQL that differs).

An entry row is committed only after its archive is in the spool (fsynced), and with several
hosts in the same transaction as the archive's bytes (blobs.py), so an id that `submit`
printed always has its archive. Every change of state goes through one short transaction
here, and every one is also appended to the event log. A claim is a lease: its stage run
is the only one whose result may be recorded (StaleClaim otherwise), and a host that stops
renewing it loses it (leases.py). The tables are in schema.py, the records returned in
rows.py and the retry policy applied in retry.py and requeue.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import QueueSite
from ..errors import VmjudgeError
from ..pipeline import FIRST, HOME_STAGES, SILENT
from .blobs import Blobs, Stored
from .claim import take_one
from .claim_fair import NEEDS_GPU, in_list, slot_filter, take_fairly
from .connection import Database, Db, open_database
from .dialect import POSTGRESQL
from .fair_share import charge
from .gpu_slots import GpuSlots
from .history import History, add_exam_results, add_scoring
from .hosts import Hosts
from .leases import Leases
from .one_statement import claim_alone, start_alone, start_held
from .outbox import entry_ended
from .phases import PhaseRecords
from .publish import record_prep_publish, record_publish
from .requeue import event, requeue_or_park
from .rows import EntryRow, Scoring, StageRun, Usage, now
from .usage import owner_usage


class StaleClaim(VmjudgeError):
    """A stage run that no longer holds its entry: its lease expired and the stage was queued
    again (perhaps already run elsewhere). What it found is not recorded."""


class Queue(History):
    def __init__(self, location: Path | str | Database, host: str | None = None, lease: float = QueueSite.lease,
                 fair_window: float = QueueSite.fair_window, stored: Stored | None = None):
        """`host` names this process's host in claims and stage runs (site.toml's default: the
        machine's name); `lease` is how long a claim of it holds without a heartbeat;
        `fair_window` how far back an owner's VM time counts for fair share; `stored` the object
        store that keeps the blobs when several hosts share no files (blobs.py), with this host's copies."""
        self.database = location if not isinstance(location, (Path, str)) else open_database(location)
        self.database.create()
        self.host, self.lease, self.fair_window = host or QueueSite().host, lease, fair_window
        self.shared = self.database.dialect.shared
        self.gpu_slots = GpuSlots(self.database)
        self.hosts = Hosts(self.database)
        self.leases = Leases(self.database)
        self.blobs = Blobs(self.database, stored)
        self.phases = PhaseRecords(self.database)  # a contest's promotions and publications

    def close(self) -> None:
        """The database files or connection this thread keeps, closed."""
        self.database.close()

    # challenges

    def add_challenge(self, name: str, directory: Path, image_key: str, gpu: str | None = None,
                      data_sha256: str | None = None, image_sha256: str | None = None) -> None:
        """Register (or register again) a challenge; `gpu` is its [vm] gpu, which decides the
        slots its stages may take; the two hashes (several hosts) what every host's copy of its
        files and image must be to judge it."""
        with self._transaction() as db:
            db.execute("INSERT INTO challenges (name, directory, image_key, registered_at, gpu, data_sha256, "
                       "image_sha256) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                       "directory = excluded.directory, image_key = excluded.image_key, gpu = excluded.gpu, "
                       "registered_at = excluded.registered_at, data_sha256 = excluded.data_sha256, "
                       "image_sha256 = excluded.image_sha256",
                       (name, str(directory), image_key, now(), gpu, data_sha256, image_sha256))
            self._record_copy(db, name, directory)
            event(db, None, "challenge", f"{self.host} registered {name} from {directory}"
                  + (f", GPU {gpu}" if gpu else ""))

    def add_copy(self, name: str, directory: Path) -> None:
        """Where this host keeps its copy of a challenge registered (with the same hashes) elsewhere."""
        with self._transaction() as db:
            self._record_copy(db, name, directory)
            event(db, None, "challenge", f"{self.host} has its copy of {name} at {directory}")

    def _record_copy(self, db: Db, name: str, directory: Path) -> None:
        db.execute("INSERT INTO challenge_copies (host, name, directory) VALUES (?, ?, ?) ON CONFLICT(host, name) "
                   "DO UPDATE SET directory = excluded.directory", (self.host, name, str(directory)))

    def challenges(self) -> list[dict[str, Any]]:
        """Every registered challenge with the directory of this host's copy."""
        with self._connect() as db:
            rows = db.execute("SELECT c.*, COALESCE(k.directory, c.directory) AS here FROM challenges c "
                              "LEFT JOIN challenge_copies k ON k.name = c.name AND k.host = ? ORDER BY c.name",
                              (self.host,)).fetchall()
        return [dict(r) for r in rows]

    def challenge_dir(self, name: str) -> Path:
        """This host's copy of the challenge: where it registered it, else where it was registered."""
        for row in self.challenges():
            if row["name"] == name:
                return Path(row["here"])
        raise VmjudgeError(f"no challenge named {name!r} is registered: run `vmjudge challenge add DIR` first.")

    # entries

    def add_entry(self, challenge: str, owner: str, late: bool, sha256: str, name: str, path: Path,
                  dry_run: bool = False, admissible: Callable[[Usage], None] | None = None, size: int = 0,
                  phase: str | None = None, exam_time_hidden: bool = False) -> int:
        """Queue an entry whose archive is stored at `path` (in a contest, to phase `phase`;
        `exam_time_hidden` when that phase keeps the exam's time back, record_publish).
        `admissible`, given what the owner has used of this board, raises to refuse it; it is
        called in the same transaction as the insert, with other admissions to the board held
        off, so two submissions at once cannot both take the last place, on one host or several."""
        with self._transaction() as db:
            if admissible is not None:  # both boards: the rate limit counts them together
                db.lock(f"admit {challenge} {owner}")
                admissible(owner_usage(db, challenge, owner, late, phase))
            if self.shared:  # no file is shared between hosts: the archive's bytes go with the entry
                self.blobs.put_file(db, sha256, path)
            entry_id = db.execute(
                "INSERT INTO entries (challenge, owner, late, dry_run, archive_sha256, archive_name, archive_path, "
                "submitted_at, state, stage, archive_bytes, phase, exam_time_hidden) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?) RETURNING id",
                (challenge, owner, int(late), int(dry_run), sha256, name, str(path), now(), FIRST, size,
                 phase, int(exam_time_hidden))).fetchone()[0]
            event(db, entry_id, "submitted", f"{name} sha256 {sha256} by {owner}" + (f" to {phase}" if phase else ""))
        return int(entry_id)

    def entry(self, entry_id: int) -> EntryRow:
        with self._connect() as db:
            row = db.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise VmjudgeError(f"there is no entry {entry_id}: `vmjudge status` lists the entries.")
        return EntryRow.from_row(row)

    def owner_usage(self, challenge: str, owner: str, late: bool, phase: str | None = None) -> Usage:
        """What `owner` has used of one board of `challenge` (of phase `phase` in a contest), for
        the entry limits and the budget.

        Pending entries are queued or running and may yet be scored, so they count until they
        end otherwise; a declared dry run never can be scored and never counts. Failed, dry-run
        and parked entries do not count. Every stage run's charged VM time counts, whatever
        its entry became, but the organiser's re-runs never do (fair_share.py says why)."""
        with self._connect() as db:
            return owner_usage(db, challenge, owner, late, phase)

    def entries(self, states: tuple[str, ...] | None = None) -> list[EntryRow]:
        with self._connect() as db:
            if states:
                rows = db.execute(f"SELECT * FROM entries WHERE {in_list('state', states)} ORDER BY id",
                                  states).fetchall()
            else:
                rows = db.execute("SELECT * FROM entries ORDER BY id").fetchall()
        return [EntryRow.from_row(r) for r in rows]

    def _runnable(self, only: int | None, challenges: tuple[str, ...] | None) -> tuple[str, tuple[Any, ...]]:
        """SQL for the queued entries this host may take, whatever the slot: `only` one entry,
        of `challenges` (those whose files and image this host has; None: all) and, with
        several hosts, a stage on a home disk only on the host that holds it."""
        where: str = ""
        args: tuple[Any, ...] = ()
        if only:
            where, args = " AND e.id = ?", (only,)
        if challenges is not None:
            where, args = where + f" AND {in_list('e.challenge', challenges)}", args + challenges
        if self.shared:
            where += f" AND (NOT {in_list('e.stage', HOME_STAGES)} OR e.home_host IS NULL OR e.home_host = ?)"
            args = args + HOME_STAGES + (self.host,)
        return where, args

    def claim_next(self, only: int | None = None, gpu: tuple[str, ...] | None = None,
                   challenges: tuple[str, ...] | None = None) -> EntryRow | None:
        """The next queued stage that a slot of this kind may run (gpu: None for a CPU slot,
        else the GPU models the slot's card answers to), now running under this host's lease;
        None when nothing such waits. Which one is fair share (fair_share.py): participants'
        stages before the organiser's batch work, then the owner who used the least VM time in
        the window, an entry already begun before an owner's new ones, oldest first. Hosts
        claiming at once each get another entry: a row one is claiming is skipped by the
        others, never waited for."""
        slot_where, slot_args = slot_filter(gpu)
        where, args = self._runnable(None, challenges)
        where, args = slot_where + where, slot_args + args
        at = time.time()
        skip_locked, alone = self.database.dialect.skip_locked, self.database.dialect is POSTGRESQL and not only
        if alone:  # PostgreSQL: nearly always the whole claim, one statement (one_statement.py)
            with self._connect() as db:
                row = claim_alone(db, skip_locked, self.host, self.lease, self.fair_window, where, args, at)
            if row is not None:
                return EntryRow.from_row(row)
        with self._transaction() as db:
            if only:
                row = db.execute(take_one(where, skip_locked), (self.host, at + self.lease, only, at, *args)).fetchone()
            else:
                row = take_fairly(db, skip_locked, self.host, self.lease, self.fair_window, where, args, at, alone)
            if row is None:
                return None
            event(db, row["id"], "running", f"{row['stage']} by {self.host}")
        return EntryRow.from_row(row)

    def waiting(self, only: int | None = None, gpu: tuple[str, ...] | None = None,
                challenges: tuple[str, ...] | None = None) -> bool:
        """Whether any entry is queued (ready or waiting out a retry delay) that this host can
        run: every stage that needs no GPU, and GPU stages of the models in `gpu` (the ones
        its GPU slots in service answer to)."""
        cpu_where, _ = slot_filter(None)
        gpu_where, gpu_args = slot_filter(gpu) if gpu else (" AND 1 = 0", ())
        where, args = self._runnable(only, challenges)
        with self._connect() as db:
            sql = ("SELECT 1 FROM entries e JOIN challenges c ON c.name = e.challenge WHERE e.state = 'queued'"
                   + where + f" AND ((1 = 1{cpu_where}) OR (1 = 1{gpu_where})) LIMIT 1")
            return db.execute(sql, args + gpu_args).fetchone() is not None

    def waiting_for_gpu(self) -> dict[str, int]:
        """GPU model -> queued stages that need it: what the daemon says when no slot can run them."""
        with self._connect() as db:
            rows = db.execute("SELECT c.gpu AS gpu, COUNT(*) AS n FROM entries e JOIN challenges c "
                              f"ON c.name = e.challenge WHERE e.state = 'queued' AND {NEEDS_GPU} "
                              "GROUP BY c.gpu").fetchall()
        return {r["gpu"]: r["n"] for r in rows}

    def requeue_running(self) -> list[int]:
        """After this host's daemon died: its running stages go back to the queue, to be run
        again (with one host, every running stage is its)."""
        mine, args = ("lease_owner = ?", (self.host,)) if self.shared else ("1 = 1", ())
        with self._transaction() as db:
            ids = [r["id"] for r in db.execute(f"SELECT id FROM entries WHERE state = 'running' AND {mine}",
                                               args).fetchall()]
            for entry_id in ids:
                db.execute("UPDATE entries SET state = 'queued', lease_owner = NULL, lease_run = NULL, "
                           "lease_until = NULL WHERE id = ?", (entry_id,))
                db.execute("UPDATE stage_runs SET finished_at = ?, status = 'infra', reason = 'daemon-stopped', "
                           "message = 'the daemon stopped while this stage ran' "
                           "WHERE entry_id = ? AND finished_at IS NULL", (now(), entry_id))
                event(db, entry_id, "requeued", "the daemon stopped while this stage ran")
        return ids

    # stage runs

    def start_stage(self, entry_id: int, stage: str, slot: int) -> StageRun:
        """The stage run of this host's claim on the entry, which it now holds: only its result
        can be recorded; the organiser's when the entry is batch work (fair_share.py: never
        charged to its owner). StaleClaim when the claim was lost meanwhile."""
        if self.database.dialect is POSTGRESQL and stage != SILENT:  # one statement (one_statement.py)
            with self._connect() as db:
                run = start_alone(db, entry_id, stage, self.host, slot, time.time())
        else:
            with self._transaction() as db:
                run = start_held(db, self.database.dialect.for_update, entry_id, stage, self.host, slot)
        if run is None:
            raise StaleClaim(f"entry {entry_id}'s claim by {self.host} was lost before its {stage} stage started.")
        return StageRun.from_row(run)

    def _hold(self, db: Db, run: StageRun) -> None:
        """Within a transaction that records `run`'s result: refuse unless the run still holds
        its entry (host and attempt match): a host presumed dead that comes back must not
        record what another host is running again, or score an entry twice."""
        row = db.execute("SELECT lease_run FROM entries WHERE id = ?" + self.database.dialect.for_update,
                         (run.entry_id,)).fetchone()
        if row is None or row["lease_run"] != run.id:
            raise StaleClaim(f"entry {run.entry_id}'s {run.stage} attempt {run.attempt} on {run.host} no longer "
                             "holds the entry (its lease expired and the stage was queued again): its result is "
                             "not recorded.")

    def stage_run(self, run_id: int) -> StageRun:
        with self._connect() as db:
            return StageRun.from_row(db.execute("SELECT * FROM stage_runs WHERE id = ?", (run_id,)).fetchone())

    def stage_runs(self, entry_id: int) -> list[StageRun]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM stage_runs WHERE entry_id = ? ORDER BY id", (entry_id,)).fetchall()
        return [StageRun.from_row(r) for r in rows]

    def last_passed(self, entry_ids: list[int], stage: str) -> dict[int, StageRun]:
        """Each entry's last passed run of `stage`, for many entries in a few queries (a board's
        rows each show where their exam ran: one query per row cost a board 10 ms per 100 owners)."""
        found: dict[int, StageRun] = {}
        with self._connect() as db:
            for start in range(0, len(entry_ids), 500):
                some = tuple(entry_ids[start:start + 500])
                for r in db.execute(f"SELECT * FROM stage_runs WHERE stage = ? AND status = 'passed' AND "
                                    f"{in_list('entry_id', some)} ORDER BY id", (stage, *some)).fetchall():
                    found[r["entry_id"]] = StageRun.from_row(r)
        return found

    def finish_stage(self, run: StageRun, status: str, message: str, manifest: dict[str, Any],
                     reason: str | None = None, next_stage: str | None = None,
                     outcome: str | None = None, scores: dict[str, float] | None = None,
                     exam: dict[str, int] | None = None, results_sha256: str | None = None,
                     scoring: Scoring | None = None, figures: dict[str, Any] | None = None) -> None:
        """Record a stage's result and move the entry on: to `next_stage`, or to done with `outcome`.
        `results_sha256`: stage 3's archived results, linked to the entry in the same transaction;
        `scoring`: stage 4's official scoring, added to the entry's history; `figures`: what the
        run used."""
        with self._transaction() as db:
            self._hold(db, run)
            shown_until = record_prep_publish(db, run, manifest)  # a container's stage 1: publish.py
            db.execute("UPDATE stage_runs SET finished_at = ?, status = ?, reason = ?, message = ?, manifest = ?, "
                       "vm_seconds = ?, figures = ? WHERE id = ?",
                       (now(), status, reason, message, json.dumps(manifest), charge(db, run, shown_until),
                        json.dumps(figures) if figures is not None else None, run.id))
            if exam is not None:
                db.execute("UPDATE entries SET exam = ? WHERE id = ?", (json.dumps(exam), run.entry_id))
            if results_sha256 is not None:
                add_exam_results(db, run.entry_id, run.id, results_sha256, manifest)
            if scoring is not None:
                add_scoring(db, scoring)
            if next_stage is not None:
                db.execute("UPDATE entries SET state = 'queued', stage = ?, lease_owner = NULL, lease_run = NULL, "
                           "lease_until = NULL, home_host = COALESCE(?, home_host) WHERE id = ?",
                           (next_stage, run.host if run.stage == FIRST else None, run.entry_id))
                event(db, run.entry_id, "stage", f"{run.stage} {status}; next {next_stage}")
            else:
                failed_stage = run.stage if outcome == "failed" else None
                db.execute("UPDATE entries SET state = 'done', stage = NULL, lease_owner = NULL, lease_run = NULL, "
                           "lease_until = NULL, outcome = ?, failed_stage = ?, reason = ?, scores = ?, "
                           "finished_at = ? WHERE id = ?",
                           (outcome, failed_stage, reason, json.dumps(scores) if scores is not None else None,
                            now(), run.entry_id))
                record_publish(db, run.entry_id)
                entry_ended(db, run.entry_id)  # its owner's message, sent from its publish time
                event(db, run.entry_id, "done", f"{run.stage} {status}: {outcome} {reason or ''}".strip())

    def infra_failure(self, run: StageRun, reason: str, message: str, manifest: dict[str, Any],
                      park: bool = False) -> bool:
        """Record an infrastructure failure; the stage is queued again, after a delay, or the
        entry is parked for the organiser, as the retry policy (retry.py) decides, or at once
        (`park`: the challenge's own fault, which a retry would meet again). True if requeued."""
        with self._transaction() as db:
            self._hold(db, run)
            return requeue_or_park(db, run.entry_id, run.stage, run.evaluation, run.id, run.attempt, reason,
                                   message, manifest, park)

    def cancel_stage(self, run: StageRun) -> None:
        """The daemon stopped on purpose while this stage ran: queue it again, uncounted."""
        with self._transaction() as db:
            self._hold(db, run)
            db.execute("UPDATE stage_runs SET finished_at = ?, status = 'cancelled', reason = 'daemon-stopping', "
                       "message = 'the daemon was stopped while this stage ran' WHERE id = ?", (now(), run.id))
            db.execute("UPDATE entries SET state = 'queued', lease_owner = NULL, lease_run = NULL, lease_until = NULL "
                       "WHERE id = ?", (run.entry_id,))
            event(db, run.entry_id, "requeued", f"{run.stage}: the daemon was stopped; it will run again")
