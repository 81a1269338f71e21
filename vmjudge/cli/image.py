"""`vmjudge image`: build the guest images of a challenge, and move them between hosts."""

from __future__ import annotations

from pathlib import Path

import click

from ..config import load_challenge
from ..images.build import build_image
from .challenge import make_data_disks
from .echo import echo
from .home import site_of
from .image_transfer import image_export, image_import


@click.group()
def image() -> None:
    """Build and inspect guest images."""


@image.command("build")
@click.argument("challenge_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Rebuild even if an image for this recipe exists.")
@click.option("--phase", default=None, help="Only this phase's image (a contest's phases may each have one).")
@click.pass_context
def image_build(ctx: click.Context, challenge_dir: Path, force: bool, phase: str | None) -> None:
    """Build the guest images for CHALLENGE_DIR's [image] recipe and its phases' [phase.image]
    (cached by recipe hash); prints each image's directory."""

    site = site_of(ctx)
    challenge = load_challenge(challenge_dir)
    recipes = (challenge.in_phase(phase).image,) if phase is not None else challenge.recipes
    for recipe in recipes:
        built = build_image(site, recipe, progress=lambda m: echo(m, err=True), force=force)
        echo(str(built.directory))
    make_data_disks(site, challenge)  # the challenge's record sets, ready before its first stage


image.add_command(image_export)
image.add_command(image_import)
