"""`vmjudge usage`: each owner's entries and VM time on a challenge, beside its budget, and
apart from it the time the organiser's re-runs of them took (never charged to the owner).

The organiser's view, exact to the second; what a participant is told of the budget is in
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
    said = f"{r.owner}{' (late)' if r.late else ''}: {r.entries} entries, {r.scored} scored, " \
           f"{exact(used)} of VM time used"
    if left is not None:
        said += f", {exact(left)} left of {budget:g} h"
    if r.organiser_seconds > 0:
        said += f"; the organiser's re-runs took {exact(math.floor(r.organiser_seconds))} more, never charged"
    return said


@click.command("usage")
@click.argument("challenge")
@click.option("--owner", help="Only this owner.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def usage(ctx: click.Context, challenge: str, owner: str | None, as_json: bool) -> None:
    """Each owner's entries and VM hours used (and left, with [limits] vm_hours) on each board of
    CHALLENGE, and the hours the organiser's re-runs took, which are never charged."""
    _, queue = site_and_queue(ctx)
    budget = load_challenge(queue.challenge_dir(challenge)).limits.vm_hours
    rows = usage_by_owner(queue.database, challenge, owner)
    if as_json:
        echo(json.dumps({"challenge": challenge, "vm_hours": budget, "owners": [
            {"owner": r.owner, "late": r.late, "entries": r.entries, "scored": r.scored,
             "vm_hours_used": round(r.vm_seconds / 3600, 4),
             "vm_hours_left": None if budget is None else round(max(0.0, budget - r.vm_seconds / 3600), 4),
             "organiser_vm_hours": round(r.organiser_seconds / 3600, 4)}
            for r in rows]}, indent=2))
        return
    for r in rows:
        echo(line(r, budget))
    if not rows:
        echo(f"no entries of {challenge}" + (f" by {owner}" if owner else ""))
