"""`vmjudge usage`: each owner's entries and VM time on a challenge, beside its budget, and
apart from it the time the organiser's re-runs of them took (never charged to the owner).

In a contest each phase has boards, and a budget, of its own: a line per owner, phase and
board. The organiser's view, exact to the second; what a participant is told of the budget is in
tenths (queue/admit.py budget_tenths), since the exam's run time is in it.
"""

from __future__ import annotations

import json
import math

import click

from ..config import load_challenge
from ..queue.listing import OwnerUsage, usage_by_owner
from .echo import echo
from .home import site_and_queue


def exact(seconds: int) -> str:
    """Hours to read at a glance, and the whole seconds behind them: `1.25 h (4500 s)`."""
    return f"{seconds / 3600:.2f} h ({seconds} s)"


def used_and_left(used: float, budget: float | None) -> tuple[int, int | None]:
    """The seconds used, rounded down, and left, rounded up: so `0 s left` is shown exactly
    when `submit` refuses (the time used has reached the budget), and the two add up to it."""
    return math.floor(used), None if budget is None else math.ceil(max(0.0, budget * 3600 - used))


def line(r: OwnerUsage, budget: float | None) -> str:
    used, left = used_and_left(r.vm_seconds, budget)
    said = f"{r.owner}{' (late)' if r.late else ''}{f' in phase {r.phase}' if r.phase else ''}: {r.entries} " \
           f"entries, {r.scored} scored, {exact(used)} of VM time used"
    if left is not None:
        said += f", {exact(left)} left of {budget:g} h"
    if r.organiser_seconds > 0:
        said += f"; the organiser's re-runs took {exact(math.floor(r.organiser_seconds))} more, never charged"
    return said


@click.command("usage")
@click.argument("challenge")
@click.option("--owner", help="Only this owner.")
@click.option("--phase", default=None, help="Only this phase of a contest (each has its own boards and budget).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def usage(ctx: click.Context, challenge: str, owner: str | None, phase: str | None, as_json: bool) -> None:
    """Each owner's entries and VM hours used (and left, with [limits] vm_hours) on each board of
    CHALLENGE (of each phase of a contest), and the hours the organiser's re-runs took, which are
    never charged."""
    _, queue = site_and_queue(ctx)
    ch = load_challenge(queue.challenge_dir(challenge))
    if phase is not None:
        ch.phase_named(phase)  # an unknown phase is one sentence, not an empty list
    order = {p.name: p.position for p in ch.phases}
    rows = sorted(usage_by_owner(queue.database, challenge, owner, phase),
                  key=lambda r: (r.owner, order.get(r.phase or "", -1), r.late))

    def budget(r: OwnerUsage) -> float | None:
        return ch.in_phase(r.phase if r.phase in order else None).limits.vm_hours

    def document(r: OwnerUsage) -> dict[str, object]:
        hours = budget(r)
        return {"owner": r.owner, "late": r.late, **({"phase": r.phase, "phase_vm_hours": hours} if r.phase else {}),
                "entries": r.entries, "scored": r.scored, "vm_hours_used": round(r.vm_seconds / 3600, 4),
                "vm_hours_left": None if hours is None else round(max(0.0, hours - r.vm_seconds / 3600), 4),
                "organiser_vm_hours": round(r.organiser_seconds / 3600, 4)}

    if as_json:
        echo(json.dumps({"challenge": challenge, "vm_hours": ch.limits.vm_hours,
                         "owners": [document(r) for r in rows]}, indent=2))
        return
    for r in rows:
        echo(line(r, budget(r)))
    if not rows:
        echo(f"no entries of {challenge}" + (f" by {owner}" if owner else ""))
