"""Carrying an entry into a later phase of a contest: `vmjudge carry CHALLENGE --phase P ID`,
or the portal's "Choose for phase P".

HECKTOR's test phase took no uploads: each team chose one of the entries that had passed
validation, and that very container was run on the test set. So a carried entry is a new
entry of the later phase with the same archive (the spool's, content-addressed: nothing is
uploaded or stored again, and the archive's bytes are not counted twice against the owner's
spool), judged again from stage 1 on the phase's own data, on its own board. The entry it
came from is unchanged.

It is refused, in one sentence each, outside the phase's window, for an owner the phase did
not promote, for an entry of another phase or a late one, for an entry carried there before,
past the phase's limits per owner, and for an entry that did not pass the phase it comes from
(or is still judged there). The checks and the new row are one transaction that holds off the
owner's other admissions (and, on PostgreSQL, other hosts'), so two carries at once cannot both
take the last place.

A carry is an answer a participant can ask for as often as they like, so it tells nothing the
phase carried from keeps back (issue 54). Every check that reads nothing hidden comes first
(the window, the owner's, promotion, the entry's phase, carried before, the limits per owner),
and while the phase carried from shows its entries at "none" (phase_rules.shown_level: it, or
a phase it carries from, gives no feedback until published) whether the entry passed is not
checked at all: any official entry of that phase may be carried, passed, failed or still
judged, and the answer is the same. Checking it would tell the verdict, by a refusal's sentence
or by a refusal at all. The entry carried is judged again from stage 1, so one that failed
fails again in the new phase, whose entries are shown at "none" too until the phase carried
from is published (phase_view.py): what its own stages said would be the source's verdict. At
"errors" and "full" the verdict is shown on the entry's own page, and the carry says it as
before. HECKTOR's rule, "an entry that passed validation", is that of a phase that shows its
verdicts, as HECKTOR's validation did.
"""

from __future__ import annotations

import time

from ..config import Challenge, Phase
from ..errors import EntryError
from ..pipeline import FIRST
from .admit import Admitted, hours, owner_limits
from .connection import Db
from .db import Queue
from .phase_rules import named_phase, promotion_refusal, quota_refusal, shown_level, window_refusal
from .publish import being_examined, preparing
from .requeue import event
from .rows import EntryRow, Usage, now
from .usage import owner_usage


def _official(name: str, phase: Phase, source: EntryRow, entry_id: int) -> None:
    """Refuse a source entry that is not an official entry of the phase carried from: what the
    entry's own page says (its phase, late or not), whatever became of it."""
    if source.phase != phase.carry:
        where = f"phase {source.phase}" if source.phase else "no phase"
        raise EntryError("not-carryable", f"entry {entry_id} is an entry of {where}, and phase {phase.name} of {name} "
                                          f"takes entries carried from phase {phase.carry}.")
    if source.late:
        raise EntryError("not-carryable", f"entry {entry_id} is a late entry: only official entries of phase "
                                          f"{phase.carry} can be carried into phase {phase.name}.")


def _passed(name: str, phase: Phase, source: EntryRow, entry_id: int, at: float) -> None:
    """Refuse a source entry that did not pass the phase carried from, as its owner sees it:
    one still being examined (or a container's stage 1 not yet published) is still judged,
    whatever became of it. Only where that phase shows verdicts (not at "none")."""
    examined = being_examined(source, at) or preparing(source, at)  # still judged, as participants see it
    if source.state == "done" and source.outcome == "scored" and not examined:
        return
    if source.state in ("queued", "running") or examined:
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
    published = {p for (_, p) in queue.phases.publications(name)}
    feedback = shown_level(ch, phase, published)  # what participants see of the new entry
    assert phase.carry is not None  # a phase that takes no uploads carries (config/phase.py)
    verdicts_shown = shown_level(ch, ch.phase_named(phase.carry), published) != "none"
    with queue.database.transaction() as db:
        row = db.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
        source = EntryRow.from_row(row) if row is not None else None
        if source is None or source.challenge != name or (owner is not None and source.owner != owner):
            raise EntryError("not-carryable", f"{name} has no entry {entry_id}" + (f" of {owner}" if owner else "")
                             + f": give the number of an official entry of phase {phase.carry} (`vmjudge entries "
                               f"{name}` lists them).")
        db.lock(f"admit {name} {source.owner}")
        used: Usage = owner_usage(db, name, source.owner, False, phase.name)
        # First what reads nothing the phase carried from keeps back; its verdict last, if shown.
        promotion_refusal(ch, name, phase, source.owner, False, used)
        _official(name, phase, source, entry_id)
        _carried_before(db, phase, entry_id)
        quota_refusal(name, phase, source.owner, False, used, feedback)
        if verdicts_shown:
            _passed(name, phase, source, entry_id, at)
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
