"""Admitting an entry: its archive checked, the owner's entry limit applied, the archive
stored in the spool and the entry queued.

PhysioNet allowed a few scored entries per phase, and dry runs and entries that could not be
scored did not count. Here `[entry] max_scored_per_owner` limits the entries of one owner on
one board (official or late) of one challenge, or of one phase of a contest ([[phase]]: each
phase has boards and limits of its own, and a window; phase_rules.py says who may enter).
An entry counts once it is scored, and while it is queued or running, since it may yet be
scored: otherwise ten entries sent at once would all be accepted. Once it ends failed, as a dry
run or parked, it gives its place back. An archive holding DRYRUN at its top can only end as a
dry run (or fail), so it is always accepted and never counts.

The archive is copied into the spool first (staged: under a name of its own, in a directory only
the judge writes) and every check reads that copy, the very bytes that are then placed under
their content address and that prep will unpack: checking the file as given and then copying it
would let it be swapped in between. The checks run outside any lock, as listing a tar.gz means
decompressing all of it: one participant's archive must not hold up everyone's admission. Only
the placing and the queue row happen under a lock on the home, so a refused entry leaves
nothing in the spool (unless the same bytes were already there, perhaps another entry's) or the
queue, and a staged copy that is refused or fails its checks is removed. The count and the
queue row are one transaction that holds off other admissions to the same board, on this host
or (PostgreSQL) any other, so two submissions at once cannot both take the last place.

A participant's own upload (the portal) is also held to the owner's limits of [limits]
(owner_limits): entries in the last hour, entries waiting or running, bytes kept in the spool.
The portal checks them before it stores a byte of the upload, and admit() again in the
transaction that adds the entry, so uploads sent at once cannot overshoot them.
"""

from __future__ import annotations

import fcntl
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..archive.checks import check_archive, check_container, check_size, declares_dry_run
from ..archive.names import check_archive_name
from ..config import Challenge, Phase, Site
from ..errors import EntryError
from .db import Queue
from .phase_rules import entrant_refusal, upload_phase, upload_refusal, window_refusal
from .rows import Usage
from .spool import Spool, StagedArchive
from .teams import Teams


@dataclass(frozen=True)
class Admitted:
    """A queued entry; `remaining` is how many more scored entries the owner may submit on
    this board now (None: no limit); `vm_used` and `vm_budget` the VM seconds charged to
    the owner on this board and allowed (None: no budget)."""

    entry_id: int
    owner: str
    late: bool
    dry_run: bool
    remaining: int | None
    vm_used: float = 0.0
    vm_budget: float | None = None
    phase: str | None = None  # the contest phase it went to
    # What participants are told of the phase now (participant.py): a phase that keeps its
    # results back keeps back the budget's tenths (the exam's time is in them) and, giving no
    # feedback at all, the entries left (an entry that fails gives its place back).
    feedback: str = "full"

    def budget_line(self) -> str | None:
        """What `submit` tells the owner about the VM-time budget, or None when there is none:
        in tenths only, as every participant's view of it (budget_tenths)."""
        if self.vm_budget is None or self.feedback != "full":
            return None
        return (f"{budget_tenths(self.vm_used, self.vm_budget)} of the {hours(self.vm_budget)} of VM "
                f"time used by {self.owner}{' on the late board' if self.late else ''}")

    def remaining_line(self) -> str | None:
        """What `submit` tells the owner about the limit, or None when there is none."""
        if self.remaining is None or self.feedback == "none":
            return None
        verb = "remains" if self.remaining == 1 else "remain"
        board = (f" in phase {self.phase}" if self.phase else "") + (" on the late board" if self.late else "")
        line = f"{_scored_entries(self.remaining)} {verb} for {self.owner}{board}"
        return f"a dry run does not count: {line}" if self.dry_run else line


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def budget_tenths(used: float, budget: float) -> str:
    """The VM time used as tenths of the budget, rounded up. The budget charges the exam's run
    time too, and an entry can encode test labels in how long its exam takes: a participant
    who read the exact time left after each entry would read them. In tenths, an entry moves
    the figure by at most a step or two, whatever it does."""
    return f"{min(10, math.ceil(10 * used / budget))}/10"


def _scored_entries(n: int) -> str:
    return f"{n} scored {'entry' if n == 1 else 'entries'}"


@contextmanager
def _admission_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def check_names(owner: str, archive_name: str) -> None:
    """Owner and archive names are shown on boards, reports and status lines: one with a newline
    would forge a line there, a control or bidi character would act on a terminal or reorder
    what is read, and one that is not UTF-8 cannot be stored. Refused before anything is.
    The archive's name is a file name on the judge's disk, counted in bytes as the file system
    counts them (255): 240 "é" are 480 bytes."""
    for what, value, longest, unit in (("owner", owner, 64, "characters"),
                                       ("archive name", archive_name, 255, "bytes")):
        size = len(value) if unit == "characters" else len(value.encode("utf-8", "surrogatepass"))
        if not value or size > longest or not value.isprintable():
            raise EntryError("bad-name", f"The {what} {value[:80]!r}{'...' if len(value) > 80 else ''} is not "
                                         f"allowed: use at most {longest} {unit} of printable characters (no control "
                                         "characters, newlines or invisible formatting) and submit again.")


def owner_limits(ch: Challenge, name: str, owner: str, used: Usage, size: int = 0, dry_run: bool = False) -> None:
    """Refuse a participant's upload of `size` bytes (0: not known yet) to challenge `name` that
    the owner's limits of [limits] do not allow now, on both boards together; a dry run (a smoke
    test) is held to its own limit per day as well."""
    limits = ch.limits
    if dry_run and used.dry_runs_last_day >= limits.smoke_tests_per_day:
        raise EntryError("smoke-limit", f"{owner} has sent {used.dry_runs_last_day} smoke tests (dry runs) to {name} "
                                        f"in the last 24 hours, the most {name} runs in a day: send it again "
                                        "tomorrow, or as an entry to be scored.")
    if used.last_hour >= limits.submissions_per_hour:
        raise EntryError("rate-limit", f"{owner} has submitted {used.last_hour} entries to {name} in the last hour, "
                                       f"the most {name} accepts in an hour: submit again later.")
    if used.waiting >= limits.pending_per_owner:
        raise EntryError("pending-limit", f"{owner} has {used.waiting} "
                                          f"{'entry' if used.waiting == 1 else 'entries'} waiting or running for "
                                          f"{name}, the most {name} takes at once: submit again once one has ended.")
    cap = limits.spool_bytes_per_owner
    if used.spool_bytes >= cap:
        raise EntryError("spool-limit", f"{owner}'s entries to {name} keep {used.spool_bytes:,} bytes of archives, "
                                        f"the most {name} keeps for one owner: no further entry can be stored; ask "
                                        "the organisers if you need more.")
    if used.spool_bytes + size > cap:
        raise EntryError("spool-limit", f"This archive's {size:,} bytes would take {owner}'s entries to {name} past "
                                        f"the {cap:,} bytes of archives {name} keeps for one owner "
                                        f"({used.spool_bytes:,} kept): make the entry smaller and submit again.")


def spool_room(ch: Challenge, used: Usage) -> int:
    """How many bytes the owner's next archive may have before the spool cap refuses it."""
    return max(0, ch.limits.spool_bytes_per_owner - used.spool_bytes)


@dataclass(frozen=True)
class Prepared:
    """An archive staged in the spool and checked, ready to be admitted: `given_name` is the
    participant's name for it, `dry_run` whether it holds DRYRUN at its top (a container entry:
    whether its image has the label org.vmjudge.dryrun)."""

    staged: StagedArchive
    given_name: str
    dry_run: bool


def prepare(site: Site, name: str, ch: Challenge, archive: Path, owner: str, spool: Spool | None = None) -> Prepared:
    """Stage the archive (fsynced) and check the staged copy: the slow part of an admission,
    done without any lock (and by the portal in a worker process). A refusal leaves nothing
    staged. Picklable in and out, for that worker."""
    check_names(owner, archive.name)
    check_archive_name(archive.name, ch.entry.kind)
    check_size(ch, name, archive.name, archive.stat().st_size)  # only to spare copying a huge file
    spool = spool if spool is not None else Spool(site.layout.spool)
    staged = spool.stage(archive)
    try:
        if ch.entry.kind == "container":
            dry_run = check_container(ch, name, staged.path, given_name=archive.name).dry_run
        else:
            dry_run = declares_dry_run(check_archive(ch, name, staged.path, given_name=archive.name))
        return Prepared(staged, archive.name, dry_run)
    except BaseException:
        spool.discard(staged)
        raise


def shown_feedback(queue: Queue, name: str, phase: Phase | None) -> str:
    """What participants are told of `phase` now: its feedback level until it is published,
    everything ("full") once it is, or when there is no phase."""
    if phase is None or (name, phase.name) in queue.phases.publications(name):
        return "full"
    return phase.feedback


def enter(site: Site, queue: Queue, name: str, ch: Challenge, prepared: Prepared, owner: str, late: bool,
          spool: Spool | None = None, rate_limited: bool = False, phase: Phase | None = None,
          smoke: bool = False, person: str | None = None) -> Admitted:
    """Under the admission lock, place a prepared archive and queue its entry, with the entry
    limit, the budget, (`rate_limited`) the owner's limits and (`phase`) the phase's window and
    rules applied in the same transaction. The staged copy is gone afterwards, whatever happens."""
    spool = spool if spool is not None else Spool(site.layout.spool)
    staged, dry_run = prepared.staged, prepared.dry_run or smoke  # a smoke test is a dry run asked for at upload
    view = ch.in_phase(phase.name) if phase is not None else ch
    limit, budget = view.entry.max_scored_per_owner, view.limits.vm_hours
    feedback = shown_feedback(queue, name, phase)

    def admissible(used: Usage) -> None:
        # `person` uploads as `owner` (their team there, or themselves): still so now, under the lock a join takes
        if person is not None and Teams(queue.database).entrant(name, person) != owner:
            raise EntryError("team-changed", f"{person} joined or left a team of {name} while this upload was on "
                                             "its way: upload it again.")
        board = f"late entries to {name}" if late else name
        if phase is not None:
            board = f"{'late entries to ' if late else ''}phase {phase.name} of {name}"
            window_refusal(name, phase, late, time.time())
            entrant_refusal(ch, name, phase, owner, late, used, feedback)
        if rate_limited:
            owner_limits(view, name, owner, used, staged.size, dry_run)
        if budget is not None and used.vm_seconds >= budget * 3600:  # a dry run runs VMs too
            raise EntryError("vm-budget", f"{owner} has used the {hours(budget * 3600)} of VM time allowed "
                             f"for {board}: no further entry can be evaluated (time the judge's own failures "
                             "took is never charged).")
        if limit is not None and not dry_run and used.scored + used.pending >= limit:
            # A phase that gives no feedback does not say how many of them were scored.
            counts = "" if feedback == "none" else f" ({used.scored} scored, {used.pending} still being evaluated)"
            raise EntryError("entry-limit", f"{owner} has used the {_scored_entries(limit)} allowed for "
                             f"{board}{counts}: an entry that ends without a score gives its place back, and a dry "
                             "run (an entry holding DRYRUN) is always accepted.")
    phase_name = phase.name if phase is not None else None
    try:
        with _admission_lock(site.layout.submit_lock):  # this host's spool: a refusal removes what it placed
            stored = spool.place(staged)
            try:
                entry_id = queue.add_entry(name, owner, late, stored.sha256, prepared.given_name, stored.path,
                                           dry_run=dry_run, admissible=admissible, size=stored.size,
                                           phase=phase_name,
                                           exam_time_hidden=phase is not None and phase.keeps_exam_time_back)
            except BaseException:
                if stored.new:
                    spool.remove(stored)
                raise
            used = queue.owner_usage(name, owner, late, phase_name)
    finally:
        spool.discard(staged)  # refused or failed before placing; once placed it is gone already
    remaining = None if limit is None else max(0, limit - used.scored - used.pending)
    allowed = None if budget is None else budget * 3600
    return Admitted(entry_id, owner, late, dry_run, remaining, used.vm_seconds, allowed, phase_name, feedback)


def admit(site: Site, queue: Queue, name: str, ch: Challenge, archive: Path, owner: str, late: bool,
          spool: Spool | None = None, rate_limited: bool = False, phase: str | None = None,
          smoke: bool = False) -> Admitted:
    """Stage the archive, check the staged copy (prepare), then, under the admission lock, place
    it and queue the entry (enter). `name` is the challenge as registered, `ch` its
    challenge.toml; `spool` defaults to the home's. `rate_limited`: a participant's own upload
    (the portal), held to the owner's limits (owner_limits) in the same transaction. In a
    contest, `phase` names the phase (default: the one taking uploads now), whose window, uploads,
    promotion and limits per owner are checked first, before the archive is copied. `smoke`: a smoke
    test (DrivenData's), a dry run whatever the archive holds: it stops after the quiz."""
    chosen = upload_phase(ch, name, phase, late, time.time())
    if chosen is not None:  # refused before the archive is copied; checked again as it is queued
        upload_refusal(ch, name, chosen, late, time.time())
        entrant_refusal(ch, name, chosen, owner, late, queue.owner_usage(name, owner, late, chosen.name),
                        shown_feedback(queue, name, chosen))
    prepared = prepare(site, name, ch, archive, owner, spool)
    return enter(site, queue, name, ch, prepared, owner, late, spool, rate_limited, chosen, smoke)
