"""The `vmjudge` command line: parse, call, print. Errors become one sentence and exit 1."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from . import __version__
from .config import Site, load_challenge, load_site
from .errors import VmjudgeError


class _Cli(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except VmjudgeError as exc:
            click.echo(f"vmjudge: {exc}", err=True)
            sys.exit(1)


@click.group(cls=_Cli)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), envvar="VMJUDGE_HOME",
              help="State directory (images, queue, results). Default: /var/lib/vmjudge as root, else ~/.vmjudge.")
@click.option("-v", "--verbose", is_flag=True, help="Log what the supervisor does.")
@click.version_option(__version__)
@click.pass_context
def main(ctx: click.Context, home: Path | None, verbose: bool) -> None:
    """Evaluate code-execution challenge entries in network-less VMs."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")
    ctx.obj = home


def _site(ctx: click.Context) -> Site:
    return load_site(ctx.find_root().obj)


@main.group()
def image() -> None:
    """Build and inspect guest images."""


@image.command("build")
@click.argument("challenge_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Rebuild even if an image for this recipe exists.")
@click.pass_context
def image_build(ctx: click.Context, challenge_dir: Path, force: bool) -> None:
    """Build the guest image for CHALLENGE_DIR's [image] recipe (cached by recipe hash)."""
    from .images.build import build_image

    site = _site(ctx)
    challenge = load_challenge(challenge_dir)
    built = build_image(site, challenge.image, progress=lambda m: click.echo(m, err=True), force=force)
    click.echo(str(built.directory))


@main.command()
@click.option("--challenge", "challenge_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Check the image of this challenge (default: the newest image built).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_context
def doctor(ctx: click.Context, challenge_dir: Path | None, as_json: bool) -> None:
    """Check qemu, libvirt, the state directory, the image and the accelerator (by a real boot)."""
    from . import doctor as doc
    from .images.build import find_image, newest_image

    site = _site(ctx)
    if challenge_dir is not None:
        recipe = load_challenge(challenge_dir).image
        checks = doc.run_checks(site, lambda: find_image(site, recipe))
    else:
        checks = doc.run_checks(site, lambda: newest_image(site))
    if as_json:
        click.echo(json.dumps({"ok": all(c.ok for c in checks), "checks": doc.as_json(checks)}, indent=2))
    else:
        for check in checks:
            click.echo(check.line())
    sys.exit(0 if all(c.ok for c in checks) else 1)


if __name__ == "__main__":
    main()
