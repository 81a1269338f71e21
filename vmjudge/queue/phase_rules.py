"""Who may put an entry into a contest's phase now, and the one sentence that says why not.

An entry goes into a phase either uploaded (a phase that takes uploads, inside its window) or
carried from the phase it names (carry.py). A phase that only promoted owners may enter
refuses everyone else; each phase counts its own entries against its limits per owner. Late
entries stay a separate, explicit board: they are taken once the phase has closed, from
anyone, and never count for promotion. Every refusal is an EntryError, the participant's to
read, which the portal answers with its status (web/failures.py) and `submit` prints.

A refusal is an answer too, so none may tell what the phase keeps back (issue 54): while a
phase shows its entries at "none" (shown_level), its limit on working entries counts every
entry accepted, since counting those that passed would say which did.
"""

from __future__ import annotations

from collections.abc import Collection

from ..config import Challenge, Phase
from ..config.phase import utc
from ..errors import ConfigError, EntryError
from .rows import Usage


def _entries(n: int) -> str:
    return f"{n} {'entry' if n == 1 else 'entries'}"


def named_phase(ch: Challenge, name: str, phase: str) -> Phase:
    """The phase called `phase`, or the participant's sentence (a name from a form is theirs)."""
    try:
        return ch.phase_named(phase)
    except ConfigError:
        if not ch.phases:
            raise EntryError("no-phase", f"{name} has no phases: send the entry without naming one.") from None
        raise EntryError("no-phase", f"{name} has no phase {phase[:40]!r}: choose one of "
                                     f"{', '.join(p.name for p in ch.phases)}.") from None


def upload_phase(ch: Challenge, name: str, phase: str | None, late: bool, at: float) -> Phase | None:
    """The phase an upload goes to: the one named, else the one taking uploads now (a late
    entry: the last one that has closed); None for a challenge without phases."""
    if phase is not None:
        return named_phase(ch, name, phase)
    if not ch.phases:
        return None
    uploads = [p for p in ch.phases if p.uploads]
    if late:
        closed = [p for p in uploads if p.has_closed(at)]
        if not closed:
            raise EntryError("phase-window", f"no phase of {name} that takes uploads has closed yet, and late "
                                             "entries are taken once a phase has closed: submit without --late.")
        return closed[-1]
    open_now = [p for p in uploads if p.is_open(at)]
    if len(open_now) == 1:
        return open_now[0]
    if open_now:
        raise EntryError("phase-choice", f"phases {', '.join(p.name for p in open_now)} of {name} all take "
                                         "uploads now: name the phase the entry is for.")
    windows = "; ".join(f"{p.name} {p.window()}" for p in uploads)
    raise EntryError("phase-window", f"no phase of {name} takes uploads now ({windows}): submit while one is open.")


def window_refusal(name: str, phase: Phase, late: bool, at: float) -> None:
    """Refuse an entry that its phase's window does not take now (late ones: before it closed)."""
    if late:
        if phase.closes is None:
            raise EntryError("phase-window", f"phase {phase.name} of {name} never closes, so it takes no late "
                                             "entries: submit without --late.")
        if not phase.has_closed(at):
            raise EntryError("phase-window", f"phase {phase.name} of {name} is open until {utc(phase.closes)}: late "
                                             "entries to it are taken once it has closed; submit without --late.")
        return
    if not phase.has_opened(at):
        assert phase.opens is not None
        raise EntryError("phase-window", f"phase {phase.name} of {name} opens at {utc(phase.opens)}: it takes no "
                                         "entry before then.")
    if phase.has_closed(at):
        assert phase.closes is not None
        raise EntryError("phase-window", f"phase {phase.name} of {name} closed at {utc(phase.closes)}: it takes no "
                                         "more entries (a late entry goes on its late board: submit it as late).")


def upload_refusal(ch: Challenge, name: str, phase: Phase, late: bool, at: float) -> None:
    """Refuse an upload to a phase that takes carried entries only, or outside its window."""
    if not phase.uploads:
        raise EntryError("phase-carry", f"phase {phase.name} of {name} takes no uploads: its entries are carried "
                                        f"from phase {phase.carry} (`vmjudge carry {name} --phase {phase.name} "
                                        f"ENTRY_ID`, or \"Choose for phase {phase.name}\" on the entry's page).")
    window_refusal(name, phase, late, at)


def promotion_refusal(ch: Challenge, name: str, phase: Phase, owner: str, late: bool, used: Usage) -> None:
    """Refuse an owner whom a phase open to promoted owners only did not admit (a late entry
    is anyone's)."""
    if phase.entrants == "promoted" and not late and not used.promoted:
        before = ch.before(phase)
        raise EntryError("not-promoted", f"{owner} was not promoted to phase {phase.name} of {name}: only the owners "
                                         f"the organisers promoted from phase {before.name if before else '?'} may "
                                         "enter it.")


def shown_level(ch: Challenge, phase: Phase | None, published: Collection[str]) -> str:
    """The feedback level participants see `phase`'s entries at now, `published` naming the
    phases published: "full" once the phase is (or with no phase); else its own `feedback`,
    but "none" while the phase it carries from is seen at "none". A carried entry is judged
    again from stage 1 with its source's archive, training set and (unless the phase has its
    own) image, so its stages 1 and 2 end as its source's did: what the phase showed of it
    would show what the source keeps back. reports/phase_view.py applies the same level to
    every participant's document and board."""
    if phase is None or phase.name in published:
        return "full"
    if phase.carry is not None:
        source = next((p for p in ch.phases if p.name == phase.carry), None)
        if source is not None and shown_level(ch, source, published) == "none":
            return "none"
    return phase.feedback


def quota_refusal(name: str, phase: Phase, owner: str, late: bool, used: Usage, level: str = "full") -> None:
    """Refuse an entry past one of the phase's limits per owner: entries submitted (or carried),
    or entries that passed it. `level`: what participants see of the phase now (shown_level);
    at "none" the working limit counts every entry accepted, as its owner sees them all
    "received", so reaching it tells nothing of which passed."""
    board = f"phase {phase.name} of {name}" + (" (late board)" if late else "")
    if phase.max_submitted_per_owner is not None and used.submitted >= phase.max_submitted_per_owner:
        verb = "carried" if phase.carry else "submitted"
        raise EntryError("phase-quota", f"{owner} has {verb} {_entries(used.submitted)} to {board}, the most it "
                                        f"takes from one owner ({phase.max_submitted_per_owner}).")
    if phase.max_working_per_owner is None:
        return
    if level == "none" and used.submitted >= phase.max_working_per_owner:
        raise EntryError("phase-quota", f"{owner} has {_entries(used.submitted)} in {board}, which takes "
                                        f"{phase.max_working_per_owner} working entries from one owner and, giving no "
                                        "feedback until its results are published, counts every entry as working "
                                        "until then: no further entry is accepted.")
    if level != "none" and used.passed >= phase.max_working_per_owner:
        raise EntryError("phase-quota", f"{owner} already has {_entries(used.passed)} that passed {board}, the most "
                                        f"it takes from one owner ({phase.max_working_per_owner}): no further entry "
                                        "is accepted.")


def entrant_refusal(ch: Challenge, name: str, phase: Phase, owner: str, late: bool, used: Usage,
                    level: str = "full") -> None:
    """Promotion, then the limits per owner (`level` as quota_refusal's): in the transaction
    that adds the entry."""
    promotion_refusal(ch, name, phase, owner, late, used)
    quota_refusal(name, phase, owner, late, used, level)
