"""Carrying an entry into a later phase of a contest: `vmjudge carry CHALLENGE --phase P ID`,
or the portal's "Choose for phase P".

HECKTOR's test phase took no uploads: each team chose one of the entries that had passed
validation, and that very container was run on the test set. So a carried entry is a new
entry of the later phase with the same archive (the spool's, content-addressed: nothing is
uploaded or stored again, and the archive's bytes are not counted twice against the owner's
spool), judged again from stage 1 on the phase's own data, on its own board. The entry it
came from is unchanged.

It is refused, in one sentence each, outside the phase's window, for an owner the phase did
not promote, for an entry of another phase or one that did not pass the phase it comes from,
for an entry carried there before, and past the phase's limits per owner. The checks and the
new row are one transaction that holds off the owner's other admissions (and, on PostgreSQL,
other hosts'), so two carries at once cannot both take the last place.
"""

from __future__ import annotations

import time

from ..config import Challenge, Phase
from ..errors import EntryError
from ..pipeline import FIRST
from .admit import Admitted, hours, owner_limits, shown_feedback
from .connection import Db
from .db import Queue
from .phase_rules import named_phase, promotion_refusal, quota_refusal, window_refusal
from .publish import being_examined
from .requeue import event
from .rows import EntryRow, Usage, now
from .usage import owner_usage


def _passed(name: str, phase: Phase, source: EntryRow, entry_id: int, at: float, quiet: bool) -> None:
    """Refuse a source entry that is not an official entry of the phase carried from, or did
    not pass it. `quiet`: the phase it comes from gives no feedback, so the sentence does not
    tell a failure from an entry still being judged."""
    if source.phase != phase.carry:
        where = f"phase {source.phase}" if source.phase else "no phase"
        raise EntryError("not-carryable", f"entry {entry_id} is an entry of {where}, and phase {phase.name} of {name} "
                                          f"takes entries carried from phase {phase.carry}.")
    if source.late:
        raise EntryError("not-carryable", f"entry {entry_id} is a late entry: only official entries of phase "
                                          f"{phase.carry} can be carried into phase {phase.name}.")
    examined = being_examined(source, at)
    if source.state == "done" and source.outcome == "scored" and not examined:
        return
    if not quiet and (source.state in ("queued", "running") or examined):
        raise EntryError("not-passed", f"entry {entry_id} is still being judged in phase {phase.carry} of {name}: "
                                       f"carry it into phase {phase.name} once it has passed.")
    raise EntryError("not-passed", f"entry {entry_id} did not pass phase {phase.carry} of {name}: only an entry "
                                   f"that passed it can be carried into phase {phase.name}.")


def _carried_before(db: Db, phase: Phase, entry_id: int) -> None:
    row = db.execute("SELECT id FROM entries WHERE carried_from = ? AND phase = ? ORDER BY id LIMIT 1",
                     (entry_id, phase.name)).fetchone()
    if row is not None:
        raise EntryError("carried-twice", f"entry {entry_id} was carried into phase {phase.name} already, as entry "
                                          f"{row['id']}: an entry is carried into a phase once.")


def carry(queue: Queue, name: str, ch: Challenge, phase_name: str, entry_id: int, rate_limited: bool = False,
          owner: str | None = None) -> Admitted:
    """Carry entry `entry_id` of challenge `name` into its phase `phase_name`, as the entry's
    owner; returns the new entry. `owner`: the participant asking (the portal), who must own
    it; `rate_limited`: held to the owner's limits of [limits], as the portal's uploads are."""
    at = time.time()
    phase = named_phase(ch, name, phase_name)
    if phase.uploads:
        raise EntryError("phase-uploads", f"phase {phase.name} of {name} takes uploads, not carried entries: submit "
                                          "the archive to it.")
    window_refusal(name, phase, False, at)
    view = ch.in_phase(phase.name)
    feedback = shown_feedback(queue, name, phase)
    source_phase = ch.phase_named(phase.carry) if phase.carry else phase
    quiet = shown_feedback(queue, name, source_phase) == "none"
    with queue.database.transaction() as db:
        row = db.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
        source = EntryRow.from_row(row) if row is not None else None
        if source is None or source.challenge != name or (owner is not None and source.owner != owner):
            raise EntryError("not-carryable", f"{name} has no entry {entry_id}" + (f" of {owner}" if owner else "")
                             + ": give the number of an entry that passed phase "
                               f"{phase.carry} (`vmjudge entries {name}` lists them).")
        db.lock(f"admit {name} {source.owner}")
        used: Usage = owner_usage(db, name, source.owner, False, phase.name)
        promotion_refusal(ch, name, phase, source.owner, False, used)
        _passed(name, phase, source, entry_id, at, quiet)
        _carried_before(db, phase, entry_id)
        quota_refusal(name, phase, source.owner, False, used)
        if rate_limited:
            owner_limits(view, name, source.owner, used)
        budget = view.limits.vm_hours
        if budget is not None and used.vm_seconds >= budget * 3600:
            raise EntryError("vm-budget", f"{source.owner} has used the {hours(budget * 3600)} of VM time allowed "
                                          f"for phase {phase.name} of {name}: no further entry can be evaluated.")
        new_id = db.execute(
            "INSERT INTO entries (challenge, owner, late, dry_run, archive_sha256, archive_name, archive_path, "
            "submitted_at, state, stage, archive_bytes, phase, carried_from, exam_time_hidden) "
            "VALUES (?, ?, 0, ?, ?, ?, ?, ?, 'queued', ?, 0, ?, ?, ?) RETURNING id",
            (name, source.owner, int(source.dry_run), source.archive_sha256, source.archive_name,
             source.archive_path, now(), FIRST, phase.name, entry_id, int(phase.keeps_exam_time_back))).fetchone()[0]
        event(db, new_id, "submitted", f"{source.archive_name} sha256 {source.archive_sha256} by {source.owner}, "
                                       f"carried from entry {entry_id} of phase {source.phase} to {phase.name}")
        event(db, entry_id, "carried", f"into phase {phase.name} as entry {new_id}")
        after = owner_usage(db, name, source.owner, False, phase.name)
    limit = view.entry.max_scored_per_owner
    remaining = None if limit is None else max(0, limit - after.scored - after.pending)
    return Admitted(int(new_id), source.owner, False, source.dry_run, remaining, after.vm_seconds,
                    None if budget is None else budget * 3600, phase.name, feedback)
