"""The organiser's two acts on a contest's phases: promoting owners into a phase, and publishing
a phase's results.

Promotion (`vmjudge promote CHALLENGE --phase test --top 15`) takes the owners at the top of
the previous phase's official board, as the organiser's board orders them (each owner's best
entry, a tie going to the earlier submission, then the lower entry id: whoever the board puts
first is promoted first), or the owners the organiser names. Publication (`vmjudge publish
CHALLENGE --phase test`) shows participants the phase's board and its entries' full reports
from that moment on; the reports kept as pages (report.html) are written again to match. Both
are recorded with who did them and when (queue/phases.py), and participants see the
promotions (reports/phase_view.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Challenge, Phase, Site
from ..errors import VmjudgeError
from ..queue.db import Queue
from ..queue.phases import Promotion, Publication
from ..reports.leaderboard import leaderboard
from ..reports.report import write_html


@dataclass(frozen=True)
class Promoted:
    """What a promotion did: the promotions made now, the owners promoted before (left as they
    were), and the board it was taken from."""

    made: list[Promotion]
    already: list[str]
    source: Phase | None


def promote(queue: Queue, name: str, ch: Challenge, phase_name: str, by: str, top: int | None = None,
            owners: tuple[str, ...] = ()) -> Promoted:
    """Promote the `top` owners of the board of the phase before `phase_name`, or `owners`."""
    phase = ch.phase_named(phase_name)
    before = ch.before(phase)
    if phase.entrants != "promoted":
        raise VmjudgeError(f"phase {phase.name} of {name} is open to every owner (entrants = \"all\"): there is no one "
                           "to promote; set entrants = \"promoted\" in its [[phase]] table if only some may enter.")
    if (top is None) == (not owners):
        raise VmjudgeError("give either --top N (the best N of the previous phase's board) or --owners NAME,... "
                           "(owners chosen by name), not both and not neither.")
    already = {p.owner for p in queue.phases.promotions(name, phase.name)}
    chosen: list[tuple[str, int | None]]
    if top is not None:
        assert before is not None  # a phase open to promoted owners is never the first (config/phase.py)
        rows = leaderboard(queue, name, phase=before.name, lower_first=ch.lower_first)  # the organiser's: every entry
        chosen = [(r.owner, r.rank) for r in rows[:top]]
        how = f"top {top} of {before.name}"
    else:
        chosen, how = [(owner, None) for owner in dict.fromkeys(owners)], "chosen by the organisers"
    made = queue.phases.promote(name, phase.name, [(o, place) for o, place in chosen if o not in already], how, by)
    return Promoted(made, [o for o, _ in chosen if o in already], before)


def publish(site: Site, queue: Queue, name: str, ch: Challenge, phase_name: str, by: str) -> tuple[Publication, int]:
    """Publish the phase now; returns the publication and how many of its entries' report pages
    were written again. Those of the phases carrying from it (at any remove) are written again
    too: a phase giving no feedback kept them at its level (queue/phase_rules.py shown_level)."""
    phase = ch.phase_named(phase_name)
    publication = queue.phases.publish(name, phase.name, by)
    touched = {phase.name}
    for later in ch.phases:  # in the contest's order: a phase carries from an earlier one
        if later.carry in touched:
            touched.add(later.name)
    written = 0
    for entry in queue.entries(("done", "parked")):
        if entry.challenge == name and entry.phase in touched:
            write_html(queue, site, entry.id)
            written += entry.phase == phase.name
    return publication, written
