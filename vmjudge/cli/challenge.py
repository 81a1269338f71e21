"""`vmjudge challenge`: making a challenge (`new`), registering it (`add`), and saying what its entries run on
(`show`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..config import Challenge, Phase, Site, check_challenge_data, load_challenge
from ..images.build import build_image, find_image
from ..images.evaluation_root import evaluation_root
from ..images.runtime import describe_runtime
from ..queue.db import Queue
from ..replica.downloads import forget, made
from ..scorers.loader import compile_scorer, load_scorer
from ..stages.data_sets import make_disks
from ..stages.score.reference_check import check_reference
from ..supervisor.cpu_gate import CpuGate
from .challenge_new import challenge_new
from .echo import echo
from .home import data_disks_of, queue_of, site_and_queue, site_of
from .hosts import register


@click.group()
def challenge() -> None:
    """Make and register challenges."""


challenge.add_command(challenge_new)


@challenge.command("add")
@click.argument("challenge_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--replace", is_flag=True, help="With several hosts: make this copy the one every host must have.")
@click.pass_context
def challenge_add(ctx: click.Context, challenge_dir: Path, replace: bool) -> None:
    """Validate CHALLENGE_DIR, build its guest images if needed (a contest's phases may each have
    one), and register it."""

    site = site_of(ctx)

    ch = load_challenge(challenge_dir)
    check_challenge_data(ch)
    if ch.evaluation is not None:  # the organiser's evaluation image: checked and unpacked once, here
        root = evaluation_root(site.layout, ch.evaluation)
        echo(f"evaluation image {root.image_id[:19]}: root {'found' if root.reused else 'made'}, "
             f"{root.squashfs_bytes >> 20} MiB", err=True)
    elif ch.isolated is not None:  # run in a VM only: compiled here, never run
        compile_scorer(ch.isolated.file)
    else:
        load_scorer(ch.scorer)
        check_reference(ch)  # the author's reference, read as every scoring will: a sentence now, not a parked entry
    images = [build_image(site, recipe, progress=lambda m: echo(m, err=True)) for recipe in ch.recipes]
    queue = queue_of(site)
    make_data_disks(site, ch, queue)
    done = register(site, queue, ch, images, replace)
    echo(f"{done}: {_sets(ch)}, scorer {ch.scorer}"
         + (f", {len(images)} images" if len(images) > 1 else "")
         + (f", its VM stages in GPU slots (gpu = \"{ch.vm.gpu}\")" if ch.vm.gpu else ""))
    for view in [ch.in_phase(p.name) for p in ch.phases] or [ch]:
        for what in [w for w, on in (("training", view.portal.training), ("sample", view.portal.sample)) if on]:
            got = made(site, view, what)  # made here once, never for a page: the portal reads their index
            echo(f"download {got.name}: {got.size} bytes, sha256 {got.sha256}", err=True)
        forget(site, view, "replica")  # its image or set may be new: made again when next asked for
    short = CpuGate(site).shortfall(ch.name, str(challenge_dir))
    if short is not None:
        echo(f"{short}: this host's daemon will take none of its stages.", err=True)


@challenge.command("show")
@click.argument("name")
@click.option("--phase", default=None, help="A phase of a contest, whose image or limits may be its own.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
@click.pass_context
def challenge_show(ctx: click.Context, name: str, phase: str | None, as_json: bool) -> None:
    """What NAME's entries run on, as the judge built it: the guest system and the challenge's packages (from
    its image's manifest), the VM, the CPU, the GPU, the network (none) and the time limits. The challenge
    page shows the same."""
    site, queue = site_and_queue(ctx)
    ch = load_challenge(queue.challenge_dir(name))
    view = ch.shared_view(phase, "the runtime")
    image = find_image(site, view.image)  # not built here: one sentence saying how to build it
    runtime = describe_runtime(view, image.manifest, site)
    if as_json:
        echo(json.dumps({"challenge": name, "image": image.key, "runtime": runtime.document()}, indent=2))
        return
    echo(f"{name}: what its entries run on (image {image.key})")
    for line in runtime.lines():
        echo(f"  {line}")


def make_data_disks(site: Site, ch: Challenge, queue: Queue | None = None) -> None:
    """Each record set's disk, made now (or fetched from the object store) for every VM of every entry."""
    for disk, count in make_disks(data_disks_of(site, queue), ch):
        echo(f"data disk {disk.key[:12]} for {disk.cd_dir}/ {disk.how} ({count} files, "
             f"{disk.path.stat().st_size / 1e6:.1f} MB)", err=True)


def _sets(ch: Challenge) -> str:
    """The record sets as `challenge add` says them: a phase's training set only where it is not
    the challenge's."""
    if not ch.phases:
        return f"{len(ch.training)} training and {len(ch.test)} test records"
    shared = (ch.directory / "training").resolve()

    def phase(p: Phase) -> str:
        own = f"{len(p.training)} training and " if p.training_dir.resolve() != shared else ""
        return f"{p.name} ({own}{len(p.test)} test records)"

    any_shared = any(p.training_dir.resolve() == shared for p in ch.phases)
    return (f"{len(ch.training)} training and " if any_shared else "") + "phases " + ", ".join(map(phase, ch.phases))
