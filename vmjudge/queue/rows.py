"""The queue's records as the rest of vmjudge sees them, and the queue's time format.

Each record is read from one row of the queue database (see db.py, which holds every SQL
statement); keeping them apart lets stages, reports and scorers name these types without
taking the queue's storage along.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from typing import Any


def now() -> str:
    return stamp(time.time())


def stamp(seconds: float) -> str:
    """The queue's time format (UTC, to the second), which sorts as text."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True)
class Usage:
    """What one owner has used of one board of a challenge: for the entry limit, the entries
    scored and those pending (queued or running, not dry runs); for the VM-time budget, the
    VM seconds charged to the owner's stage runs (never to infrastructure failures, nor to the
    organiser's re-runs); for the portal's limits, on both boards, the entries submitted in the
    last hour, those waiting or running (dry runs too) and the bytes of every archive the
    owner's entries keep in the spool. What an entry being examined did is counted as from
    its publish time (publish.py): until then it is pending and waiting, and its exam's VM time
    is not yet charged, as participants see it."""

    scored: int
    pending: int
    vm_seconds: float
    last_hour: int = 0  # entries the owner submitted to the challenge (both boards) in the last hour
    waiting: int = 0  # entries queued or running, dry runs included (both boards)
    spool_bytes: int = 0  # the archives' bytes of all the owner's entries to the challenge (both boards)
    dry_runs_last_day: int = 0  # dry runs (smoke tests) the owner submitted in the last 24 hours (both boards)
    # A contest's phase (the board is then the phase's): every entry accepted, uploaded or carried,
    # but those the judge parked; those that passed the phase (scored); whether the owner was
    # promoted into it.
    submitted: int = 0
    passed: int = 0
    promoted: bool = False


@dataclass(frozen=True)
class EntryRow:
    id: int
    challenge: str
    owner: str
    late: bool
    dry_run: bool
    archive_sha256: str
    archive_name: str
    archive_path: str
    submitted_at: str
    state: str
    stage: str | None
    outcome: str | None
    failed_stage: str | None
    reason: str | None
    scores: dict[str, float | None] | None
    exam: dict[str, int] | None
    finished_at: str | None
    evaluation: int = 1  # how many times the entry was (re)queued from stage 1
    exam_started: float | None = None  # epoch seconds: the evaluation's first exam run started
    published: float | None = None  # epoch seconds: participants may see its result from then (publish.py)
    phase: str | None = None  # the contest phase it was submitted or carried to (None: no phases)
    carried_from: int | None = None  # the entry of an earlier phase whose archive it is

    @classmethod
    def from_row(cls, row: Any) -> EntryRow:
        d = {k: v for k, v in dict(row).items() if k in _ENTRY_FIELDS}  # not the lease's columns
        d["late"] = bool(d["late"])
        d["dry_run"] = bool(d["dry_run"])
        d["scores"] = json.loads(d["scores"]) if d["scores"] else None
        d["exam"] = json.loads(d["exam"]) if d["exam"] else None
        return cls(**d)


_ENTRY_FIELDS = {f.name for f in fields(EntryRow)}


@dataclass(frozen=True)
class StageRun:
    id: int
    entry_id: int
    stage: str
    attempt: int
    host: str
    slot: int
    started_at: str
    finished_at: str | None
    status: str | None
    reason: str | None
    message: str | None
    manifest: dict[str, Any] | None
    evaluation: int = 1
    started: float | None = None  # epoch seconds
    vm_seconds: float | None = None  # the VM time the run used (an entry's own result, never the judge's failure)
    figures: dict[str, Any] | None = None  # what the run used (stages/figures.py)
    organiser: bool = False  # the organiser's batch work: its vm_seconds are never charged to the owner

    @classmethod
    def from_row(cls, row: Any) -> StageRun:
        d = dict(row)
        d["manifest"] = json.loads(d["manifest"]) if d["manifest"] else None
        d["figures"] = json.loads(d["figures"]) if d.get("figures") else None
        d["organiser"] = bool(d["organiser"])
        return cls(**d)


@dataclass(frozen=True)
class ArchivedResults:
    """Where an entry's stage-3 results are (a blob of the results store) and what made them."""

    entry_id: int
    sha256: str
    manifest: dict[str, Any]
    archived_at: str
    run_id: int | None = None

    @classmethod
    def from_row(cls, row: Any) -> ArchivedResults:
        return cls(entry_id=row["entry_id"], sha256=row["sha256"], manifest=json.loads(row["manifest"]),
                   archived_at=row["archived_at"], run_id=row["run_id"])


@dataclass(frozen=True)
class Scoring:
    """One scoring of an entry and everything it used, so any score can be traced and redone."""

    entry_id: int
    why: str  # official | rescore
    scorer: str  # as named: "af2017", "pkg.mod:func", "file.py:func"
    scorer_version: str  # scorer_version(): "af2017/1" or the code's hash
    reference_sha256: str  # reference_sha256() of the reference directory used
    results_sha256: str  # the archived stage-3 results scored
    scores: dict[str, float | None]
    at: str = ""  # set when recorded

    @classmethod
    def from_row(cls, row: Any) -> Scoring:
        d = dict(row)
        d.pop("id")
        d["scores"] = json.loads(d["scores"])
        return cls(**d)
