"""`vmjudge doctor` and `gc`: is this host fit to judge, and what may go now that entries are done."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..config import load_challenge
from ..errors import VmjudgeError
from ..images.build import find_image, newest_image
from ..images.data_disk import DataDisks
from ..images.data_store import DataDiskGc, collect_data_disks, store_bytes
from ..images.root_store import collect_roots
from ..queue import retention
from ..queue.db import Queue
from ..stages.data_sets import used_keys
from ..supervisor import doctor as doctor_checks
from ..supervisor.cores import largest_vcpus
from .echo import echo
from .home import queue_of, site_of


@click.command()
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


@click.command()
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@click.pass_context
def gc(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Remove what finished entries no longer need (entry trees, home disks, console logs,
    kept ISOs), container roots no entry still to be judged uses, data disks no registered
    challenge's record set is now, and notifications sent, failed or dropped long ago, as
    site.toml's [retention] allows; reports, logs and archives stay (with [storage], this host's copies
    of stored blobs unused for an hour go: the store keeps them)."""
    site = site_of(ctx)
    queue = queue_of(site)
    removed = retention.collect(site, queue, dry_run=dry_run)
    roots = collect_roots(site, queue, dry_run=dry_run)
    disks = _collect_disks(site.layout.data_disks, queue, dry_run)
    problems = removed.problems + roots.problems + disks.problems
    # With an object store, this host's copies of its blobs no one used within the hour: the store keeps them.
    cache = queue.blobs.cache
    copies = [] if cache is None or dry_run else [str(p) for p in cache.trim(bound=0)]
    if as_json:
        echo(json.dumps({**removed.as_json(), "entry_roots": roots.as_json(), "data_disks": disks.as_json(),
                         **({"blob_copies_removed": copies} if cache is not None else {})}, indent=2))
    else:
        for line in removed.lines() + roots.lines() + disks.lines() + \
                [f"copy of a stored blob {p}: removed (unused for an hour; the object store keeps it)" for p in copies]:
            echo(line)
        for problem in problems:
            echo(problem, err=True)
        echo(removed.summary())
        if (said := roots.summary()) is not None:
            echo(said)
        if disks.removals or disks.in_use or disks.busy:
            echo(disks.summary())
    sys.exit(1 if problems else 0)


def _collect_disks(store: Path, queue: Queue, dry_run: bool) -> DataDiskGc:
    """The data disks no registered challenge's record set is now. A challenge that cannot be read
    here leaves every disk in place: which of them are its own cannot be known."""
    disks = DataDisks(store)
    if store_bytes(disks)[0] == 0:
        return DataDiskGc(dry_run)  # nothing to remove: no challenge need be read
    challenges = []
    for row in queue.challenges():
        if not Path(row["here"]).exists():
            continue  # not judged on this host (several hosts): none of its disks is made here
        try:
            challenges.append(load_challenge(Path(row["here"])))
        except (VmjudgeError, OSError) as exc:
            return DataDiskGc(dry_run, problems=[f"data disks: none removed, as challenge {row['name']} cannot be "
                                                 f"read at {row['here']} ({exc}): fix or remove it, then run gc "
                                                 "again."])
    return collect_data_disks(disks, used_keys(disks, challenges), dry_run)
