"""`vmjudge usage`: each owner's entries and VM time on a challenge, beside its budget.

The organiser's view, exact to the second; what a participant is told of the budget is in
tenths (queue/admit.py budget_tenths), since the exam's run time is in it.
"""

from __future__ import annotations

import json

import click

from ..config import load_challenge
from ..queue.admit import hours
from ..queue.listing import usage_by_owner
from .echo import echo
from .home import site_and_queue


@click.command("usage")
@click.argument("challenge")
@click.option("--owner", help="Only this owner.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def usage(ctx: click.Context, challenge: str, owner: str | None, as_json: bool) -> None:
    """Each owner's entries and VM hours used (and left, with [limits] vm_hours) on each board of CHALLENGE."""
    _, queue = site_and_queue(ctx)
    budget = load_challenge(queue.challenge_dir(challenge)).limits.vm_hours
    rows = usage_by_owner(queue.database, challenge, owner)
    if as_json:
        echo(json.dumps({"challenge": challenge, "vm_hours": budget, "owners": [
            {"owner": r.owner, "late": r.late, "entries": r.entries, "scored": r.scored,
             "vm_hours_used": round(r.vm_seconds / 3600, 4),
             "vm_hours_left": None if budget is None else round(max(0.0, budget - r.vm_seconds / 3600), 4)}
            for r in rows]}, indent=2))
        return
    for r in rows:
        left = "" if budget is None else f", {hours(max(0.0, budget * 3600 - r.vm_seconds))} left of {budget:g} h"
        echo(f"{r.owner}{' (late)' if r.late else ''}: {r.entries} entries, {r.scored} scored, "
             f"{hours(r.vm_seconds)} of VM time used{left}")
    if not rows:
        echo(f"no entries of {challenge}" + (f" by {owner}" if owner else ""))
