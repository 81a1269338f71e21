"""`vmjudge image export` and `vmjudge image import`: a built image carried to another host
unchanged, so that every host sharing a queue judges with the same bits (images/transfer.py).

Both print each file's sha256 in `sha256sum`'s format, so the organiser can compare the two
hosts' lines, or check HOME/images/<key>/ with `sha256sum -c`."""

from __future__ import annotations

from pathlib import Path

import click

from ..config import load_challenge
from ..images.transfer import Transferred, export_image, import_image
from .echo import echo
from .home import site_of


def _hashes(done: Transferred) -> None:
    for name, digest in done.sha256.items():
        echo(f"{digest}  {name}")


@click.command("export")
@click.argument("challenge_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The tar file to write (replaced whole, never half written).")
@click.option("--phase", default=None, help="The phase whose image to export (a contest's phases may each have one).")
@click.pass_context
def image_export(ctx: click.Context, challenge_dir: Path, output: Path, phase: str | None) -> None:
    """Write CHALLENGE_DIR's built guest image to one tar file, for `vmjudge image import` on another host."""
    done = export_image(site_of(ctx), load_challenge(challenge_dir).shared_view(phase, "the image"), output)
    echo(f"image {done.key} exported to {done.path} ({sum(done.sizes.values()) / 1e6:.0f} MB)")
    _hashes(done)


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--challenge", "challenge_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Also check that FILE holds the image this host would build for CHALLENGE_DIR.")
@click.option("--phase", default=None, help="With --challenge: the phase whose image FILE holds.")
@click.pass_context
def image_import(ctx: click.Context, file: Path, challenge_dir: Path | None, phase: str | None) -> None:
    """Check FILE (written by `vmjudge image export`) and put its image in place under HOME/images."""
    challenge = load_challenge(challenge_dir).shared_view(phase, "the image") if challenge_dir is not None else None
    done = import_image(site_of(ctx), file, challenge)
    if done.already_there:
        echo(f"image {done.key} is already here with the same sha256s, so nothing was changed: {done.path}")
    else:
        echo(f"image {done.key} imported: {done.path}")
    _hashes(done)
