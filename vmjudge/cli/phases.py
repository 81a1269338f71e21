"""A contest's phases on the command line (issue 40): `vmjudge phases` (what each phase is and
where it stands), `carry` (an entry that passed a phase, judged again in the next), `promote`
(owners into a phase open to promoted owners only) and `publish` (a phase's results shown to
participants). Kept apart from main.py so each command stays small; the work is in
queue/carry.py and supervisor/phases.py.
"""

from __future__ import annotations

import getpass
import json

import click

from ..config import load_challenge
from ..queue.carry import carry as carry_entry
from ..reports import participant
from ..reports.phase_view import PhaseViews, phases_document, phases_text
from ..supervisor import phases as acts
from .echo import echo
from .home import site_and_queue


@click.command("phases")
@click.argument("challenge_name")
@click.option("--json", "as_json", is_flag=True, help="Print the phases as JSON.")
@click.pass_context
def phases(ctx: click.Context, challenge_name: str, as_json: bool) -> None:
    """CHALLENGE_NAME's phases: each one's window, what it takes, its feedback, whether it is
    published, and the owners promoted into it (what participants may know of them)."""
    _, queue = site_and_queue(ctx)
    doc = phases_document(PhaseViews.load(queue), challenge_name, participant.now())
    if as_json:
        echo(json.dumps(doc, indent=2))
    elif doc["phases"]:
        echo(phases_text(doc), nl=False)
    else:
        echo(f"{challenge_name} has no phases")


@click.command("carry")
@click.argument("challenge_name")
@click.argument("entry_id", type=int)
@click.option("--phase", required=True, help="The phase to carry the entry into.")
@click.pass_context
def carry(ctx: click.Context, challenge_name: str, entry_id: int, phase: str) -> None:
    """Carry ENTRY_ID, which passed the phase before, into PHASE of CHALLENGE_NAME, as its owner:
    the same archive, judged again from stage 1 on the phase's data. Prints the new entry id."""
    _, queue = site_and_queue(ctx)
    ch = load_challenge(queue.challenge_dir(challenge_name))
    admitted = carry_entry(queue, challenge_name, ch, phase, entry_id)
    for line in (admitted.remaining_line(), admitted.budget_line()):
        if line is not None:
            echo(line, err=True)
    echo(str(admitted.entry_id))


def _owners(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for value in values for name in value.replace(",", " ").split())


@click.command("promote")
@click.argument("challenge_name")
@click.option("--phase", required=True, help="The phase to promote owners into.")
@click.option("--top", type=click.IntRange(1), help="The best N owners of the previous phase's board.")
@click.option("--owners", multiple=True, metavar="NAME,...", help="These owners (repeat, or separate with commas).")
@click.option("--by", default=None, help="Who promotes, as recorded (default: the current user).")
@click.pass_context
def promote(ctx: click.Context, challenge_name: str, phase: str, top: int | None, owners: tuple[str, ...],
            by: str | None) -> None:
    """Promote owners into PHASE of CHALLENGE_NAME: the --top N of the previous phase's board
    (ties as the board orders them) or the --owners named; recorded with who and when, and
    shown to participants."""
    _, queue = site_and_queue(ctx)
    ch = load_challenge(queue.challenge_dir(challenge_name))
    done = acts.promote(queue, challenge_name, ch, phase, by or getpass.getuser(), top, _owners(owners))
    for p in done.made:
        echo(f"promoted {p.owner} into phase {p.phase}" + (f" (place {p.place} of {done.source.name})"
                                                           if p.place and done.source else "") + f", {p.how}")
    for owner in done.already:
        echo(f"{owner} was promoted into phase {phase} before: left as it was")
    if not done.made and not done.already:
        echo(f"no one promoted: the board of phase {done.source.name if done.source else '?'} has no scored entry")
    if done.source is not None and not done.source.has_closed(participant.now()) and top is not None:
        echo(f"phase {done.source.name} is still open, so its board may change: promote again later to add "
             "owners who rise into the top", err=True)


@click.command("publish")
@click.argument("challenge_name")
@click.option("--phase", required=True, help="The phase whose results to publish.")
@click.option("--by", default=None, help="Who publishes, as recorded (default: the current user).")
@click.pass_context
def publish(ctx: click.Context, challenge_name: str, phase: str, by: str | None) -> None:
    """Publish PHASE of CHALLENGE_NAME: from now on participants see its board and its entries'
    full reports. Recorded with who and when; a publication is not taken back."""
    site, queue = site_and_queue(ctx)
    ch = load_challenge(queue.challenge_dir(challenge_name))
    publication, written = acts.publish(site, queue, challenge_name, ch, phase, by or getpass.getuser())
    found = ch.phase_named(phase)
    still = " (it is still open: entries judged from now on are shown in full at once)" \
        if not found.has_closed(publication.seconds) else ""
    echo(f"published phase {phase} of {challenge_name} at {publication.at} by {publication.by}: its board and its "
         f"{written} finished entries' full reports are shown to participants{still}")
