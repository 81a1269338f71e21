"""The `vmjudge` command line: parse, call, print. Errors become one sentence and exit 1."""

from __future__ import annotations

import getpass
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import click

from .. import __version__
from ..config import Site, load_challenge
from ..images.build import build_image, find_image, newest_image
from ..images.root_store import collect_roots
from ..queue import retention
from ..queue.admit import admit
from ..queue.db import Queue
from ..queue.listing import queue_status
from ..reports import participant, report
from ..supervisor import confinement
from ..supervisor import doctor as doctor_checks
from ..supervisor.cores import largest_vcpus
from ..supervisor.cpu_gate import CpuGate
from ..supervisor.daemon import DaemonBusy, serve
from ..supervisor.progress import Progress
from ..terminal import PrintableFormatter
from ..vm.hardware import line as hardware_line
from .challenge import challenge
from .echo import echo, errors_printed
from .entries import entries, logs
from .gpu import gpu, slot_json, slot_line
from .home import queue_of, site_of
from .hosts import host_json, host_line
from .image_transfer import image_export, image_import
from .leaderboard import leaderboard_cmd
from .notify import notify
from .owners import owner
from .phases import carry, phases, promote, publish
from .replica import replica
from .rescore import rescore
from .service import service
from .usage import usage
from .web import web


class _Cli(click.Group):
    """Errors of every subcommand, and of parsing the command line, are printed by echo.py."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with errors_printed():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with errors_printed():
            return super().invoke(ctx)


@click.group(cls=_Cli)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), envvar="VMJUDGE_HOME",
              help="State directory (images, queue, results). Default: /var/lib/vmjudge as root, else ~/.vmjudge.")
@click.option("-v", "--verbose", is_flag=True, help="Log what the supervisor does.")
@click.version_option(__version__)
@click.pass_context
def main(ctx: click.Context, home: Path | None, verbose: bool) -> None:
    """Evaluate code-execution challenge entries in network-less VMs."""
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    ctx.obj = home


main.add_command(challenge)


def _submit(site: Site, name: str, archive: Path, owner: str, late: bool, phase: str | None = None) -> int:
    """Admit the entry (checks, entry limit, spool, queue); say on stderr how many scored
    entries the owner has left, so that stdout stays the entry id alone."""

    queue = queue_of(site)
    admitted = admit(site, queue, name, load_challenge(queue.challenge_dir(name)), archive, owner, late,
                     phase=phase)
    for line in (admitted.remaining_line(), admitted.budget_line()):
        if line is not None:
            echo(line, err=True)
    return admitted.entry_id


@main.command()
@click.argument("challenge_name")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--owner", default=None, help="Who submits (default: the current user).")
@click.option("--late", is_flag=True, help="A late entry, ranked apart from the official ones.")
@click.option("--phase", default=None, help="A contest's phase (default: the one taking uploads now).")
@click.pass_context
def submit(ctx: click.Context, challenge_name: str, archive: Path, owner: str | None, late: bool,
           phase: str | None) -> None:
    """Queue ARCHIVE (NAME-entry.zip or NAME-entry.tar.gz) for CHALLENGE_NAME; prints the entry id."""

    entry_id = _submit(site_of(ctx), challenge_name, archive, owner or getpass.getuser(), late, phase)
    echo(str(entry_id))


@main.command()
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


@main.command()
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


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """The queue: entries waiting or running, how many are done, the hosts and the GPU slots."""
    site = site_of(ctx)
    queue = queue_of(site)
    found = queue_status(queue.database)
    active, done = found.active, found.done
    gpus, hosts = queue.gpu_slots.all(), queue.hosts.all()
    if as_json:
        echo(json.dumps({"active": [{"id": e.id, "challenge": e.challenge, "owner": e.owner,
                                           "state": e.state, "stage": e.stage} for e in active],
                               "done": done, "gpus": [slot_json(g) for g in gpus],
                         "hosts": [host_json(h, site.queue.lease) for h in hosts]}, indent=2))
        return
    for e in active:
        echo(f"{e.id:>6}  {e.state:<8} {e.stage or '':<6} {e.challenge:<16} {e.owner}")
    echo(f"{len(active)} waiting or running, {done} done")
    for h in hosts:
        echo(host_line(h, site.queue.lease))
    for g in gpus:
        echo(slot_line(g))


@main.command()
@click.argument("entry_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@click.option("--organiser", is_flag=True, help="Add every attempt, manifests and internal logs.")
@click.option("--wait", is_flag=True, help="If the exam's outcome waits for its publish time, wait for it first.")
@click.pass_context
def show(ctx: click.Context, entry_id: int, as_json: bool, organiser: bool, wait: bool) -> None:
    """The report for ENTRY_ID."""

    site = site_of(ctx)
    if wait:
        _until_published(queue_of(site), entry_id)
    doc = report.show(site, queue_of(site), entry_id, organiser=organiser)
    if as_json:
        echo(report.as_json(doc))
        return
    echo(doc["report"], nl=False)
    if "hardware" in doc:
        echo(hardware_line(doc["hardware"]))
    if organiser:
        for line in doc["organiser"]["figures"]:
            echo(line)
        echo(report.as_json(doc["organiser"]))


def _until_published(queue: Queue, entry_id: int) -> None:
    """Participants see an exam's outcome from its publish time on (a tenth of the exam's cap after
    it started, queue/publish.py); until then `show` says "being examined". An organiser who has
    just run the daemon, or a script, waits for that moment rather than guessing it."""
    while participant.examining(entry := queue.entry(entry_id), now := participant.now()):
        time.sleep(min(5.0, entry.published - now) if entry.published is not None else 1.0)


@main.group()
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


@main.command()
@click.option("--challenge", "challenge_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Check the image of this challenge (default: the newest image built).")
@click.option("--slots", type=click.IntRange(1, 64), default=1, show_default=True,
              help="The daemon's VMs at a time (as `daemon --slots`): do they fit the host's cores?")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_context
def doctor(ctx: click.Context, challenge_dir: Path | None, slots: int, as_json: bool) -> None:
    """Check qemu, libvirt, the state directory, the cores for SLOTS slots, the image, the accelerator
    (by a real boot) and each [gpu]."""

    site = site_of(ctx)
    challenge_ = load_challenge(challenge_dir) if challenge_dir is not None else None
    vcpus = largest_vcpus(queue_of(site), (challenge_.vm.vcpus,) if challenge_ is not None else ())
    if challenge_ is not None:
        recipe = challenge_.recipes[0]  # a contest's phases may have images of their own: its first phase's
        level = (challenge_.name, challenge_.vm.cpu_level) if challenge_.vm.cpu_level else None
        checks = doctor_checks.run_checks(site, lambda: find_image(site, recipe), slots, vcpus, level)
    else:
        checks = doctor_checks.run_checks(site, lambda: newest_image(site), slots, vcpus)
    if as_json:
        echo(json.dumps({"ok": all(c.ok for c in checks), "profile": site.profile,
                         "checks": doctor_checks.as_json(checks)}, indent=2))
    else:
        for check in checks:
            echo(check.line())
    sys.exit(0 if all(c.ok for c in checks) else 1)


@main.command()
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@click.pass_context
def gc(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Remove what finished entries no longer need (entry trees, home disks, console logs,
    kept ISOs), container roots no entry still to be judged uses, and notifications sent, failed
    or dropped long ago, as site.toml's [retention] allows; reports, logs and archives stay."""
    site = site_of(ctx)
    queue = queue_of(site)
    removed = retention.collect(site, queue, dry_run=dry_run)
    roots = collect_roots(site, queue, dry_run=dry_run)
    if as_json:
        echo(json.dumps({**removed.as_json(), "entry_roots": roots.as_json()}, indent=2))
    else:
        for line in removed.lines() + roots.lines():
            echo(line)
        for problem in removed.problems + roots.problems:
            echo(problem, err=True)
        echo(removed.summary())
        if (said := roots.summary()) is not None:
            echo(said)
    sys.exit(1 if removed.problems or roots.problems else 0)


main.add_command(rescore)
main.add_command(leaderboard_cmd)
main.add_command(gpu)
main.add_command(entries)
main.add_command(logs)
main.add_command(usage)
main.add_command(service)
main.add_command(replica)
main.add_command(owner)
main.add_command(notify)
main.add_command(web)
main.add_command(phases)
main.add_command(carry)
main.add_command(promote)
main.add_command(publish)
image.add_command(image_export)
image.add_command(image_import)
