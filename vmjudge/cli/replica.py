"""`vmjudge replica ...`: the organiser's commands for the participants' replica ISO."""

from __future__ import annotations

from pathlib import Path

import click

from ..config import load_challenge
from ..replica.build import build_replica
from .echo import echo
from .home import queue_of, site_of


@click.group()
def replica() -> None:
    """Build the replica ISO participants boot to check their entries."""


@replica.command("build")
@click.argument("challenge_name")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the ISO, e.g. replica.iso.")
@click.option("--phase", default=None, help="The contest phase it is for: that phase's training set and image.")
@click.pass_context
def build(ctx: click.Context, challenge_name: str, output: Path, phase: str | None) -> None:
    """Write the bootable replica ISO of registered CHALLENGE_NAME (or of a challenge directory)."""
    site = site_of(ctx)
    given = Path(challenge_name)
    directory = given if given.is_dir() else queue_of(site).challenge_dir(challenge_name)
    ch = load_challenge(directory).shared_view(phase, "the replica")
    built = build_replica(site, ch, output, progress=lambda m: echo(m, err=True))
    echo(f"{built.path} {built.size}")
