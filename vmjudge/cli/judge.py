"""`vmjudge submit`, `daemon` and `evaluate`: entries into the queue, and the queue through the stages."""

from __future__ import annotations

import getpass
import sys
import time
from pathlib import Path

import click

from ..config import Site, load_challenge
from ..queue.admit import admit
from ..reports import participant, report
from ..supervisor import confinement
from ..supervisor.cpu_gate import CpuGate
from ..supervisor.daemon import DaemonBusy, serve
from ..supervisor.progress import Progress
from .echo import echo
from .home import queue_of, site_of


def _submit(site: Site, name: str, archive: Path, owner: str, late: bool, phase: str | None = None,
            smoke: bool = False) -> int:
    """Admit the entry (checks, entry limit, spool, queue); say on stderr how many scored
    entries the owner has left, so that stdout stays the entry id alone."""

    queue = queue_of(site)
    admitted = admit(site, queue, name, load_challenge(queue.challenge_dir(name)), archive, owner, late,
                     phase=phase, smoke=smoke)
    for line in (admitted.remaining_line(), admitted.budget_line()):
        if line is not None:
            echo(line, err=True)
    return admitted.entry_id


@click.command()
@click.argument("challenge_name")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--owner", default=None, help="Who submits (default: the current user).")
@click.option("--late", is_flag=True, help="A late entry, ranked apart from the official ones.")
@click.option("--phase", default=None, help="A contest's phase (default: the one taking uploads now).")
@click.option("--smoke", is_flag=True, help="A smoke test: a dry run (stages 1 and 2 on the public sample, never "
              "scored), whatever the archive holds.")
@click.pass_context
def submit(ctx: click.Context, challenge_name: str, archive: Path, owner: str | None, late: bool,
           phase: str | None, smoke: bool) -> None:
    """Queue ARCHIVE (NAME-entry.zip or NAME-entry.tar.gz; for a container challenge, the saved image,
    any .tar or .tar.gz from docker save) for CHALLENGE_NAME; prints the entry id."""

    entry_id = _submit(site_of(ctx), challenge_name, archive, owner or getpass.getuser(), late, phase, smoke)
    echo(str(entry_id))


@click.command()
@click.option("--slots", type=click.IntRange(1, 64), default=1, show_default=True, help="VMs at a time.")
@click.option("--until-idle", is_flag=True, help="Exit once nothing is queued or running.")
@click.option("-q", "--quiet", is_flag=True, help="No line per stage, no summary (warnings and errors still).")
@click.pass_context
def daemon(ctx: click.Context, slots: int, until_idle: bool, quiet: bool) -> None:
    """Evaluate queued entries, stage by stage, SLOTS VMs at a time; a line on stderr as each
    stage starts and ends, and a summary at the end."""

    site = site_of(ctx)
    queue = queue_of(site)
    serve(site, queue, slots, until_idle, progress=None if quiet else Progress(queue, lambda m: echo(m, err=True)))


@click.command()
@click.argument("challenge_name")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--owner", default=None)
@click.option("--phase", default=None, help="A contest's phase (default: the one taking uploads now).")
@click.pass_context
def evaluate(ctx: click.Context, challenge_name: str, archive: Path, owner: str | None, phase: str | None) -> None:
    """Submit ARCHIVE and evaluate it in the foreground, as PhysioNet's `evaluate` did."""


    site = site_of(ctx)
    queue = queue_of(site)
    why = confinement.refusal(site)  # before the entry is queued, not after (serve() asks again)
    if why is not None:
        raise confinement.Unconfined(why)
    entry_id = _submit(site, challenge_name, archive, owner or getpass.getuser(), False, phase)
    echo(f"entry {entry_id}")
    try:
        serve(site, queue, 1, until_idle=True, only=entry_id,
              on_change=lambda e: echo(f"stage {e.stage} ..."))
    except DaemonBusy as exc:
        echo(f"{exc}; waiting for it to evaluate entry {entry_id}")
        seen = None
        try:
            while queue.entry(entry_id).state not in ("done", "parked"):
                e = queue.entry(entry_id)
                if (e.state, e.stage) != seen:
                    seen = (e.state, e.stage)
                    echo(f"{e.state} {e.stage or ''}")
                time.sleep(2)
        except KeyboardInterrupt:
            pass  # the daemon goes on with the entry; said below
    entry = queue.entry(entry_id)
    short = CpuGate(site).shortfall(challenge_name, str(queue.challenge_dir(challenge_name))) \
        if entry.state == "queued" else None
    if short is not None:  # never claimed here: the guests' CPU is below the challenge's level
        echo(f"entry {entry_id} stays queued: {short}.", err=True)
        sys.exit(1)
    if entry.state == "queued" and not queue.waiting(entry_id):  # queued, but not for a CPU slot
        echo(f"entry {entry_id} waits for a GPU slot at stage {entry.stage}, and this host has none in service "
             "that can run it (`vmjudge gpu list` says why); it stays queued for a daemon that has one.", err=True)
        sys.exit(1)
    if entry.state not in ("done", "parked"):  # Ctrl-C or SIGTERM: serve put the stage back
        echo(f"interrupted: entry {entry_id} is {entry.state} at stage {entry.stage}; `vmjudge daemon` will "
             "finish it, and `vmjudge show` gives its report.", err=True)
        sys.exit(130)
    doc = report.show(site, queue, entry_id, at=participant.AS_PUBLISHED)  # the organiser's command: no wait
    echo(doc["report"], nl=False)
    sys.exit(0 if doc["outcome"] in ("scored", "dry-run") else 1)
