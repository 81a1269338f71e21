"""`vmjudge status`: the queue at a glance, and the hosts that share it."""

from __future__ import annotations

import json

import click

from ..images.data_disk import DataDisks
from ..images.data_store import store_bytes
from ..queue.hosts import HostRow
from ..queue.listing import STATUS_LISTED, queue_status
from .echo import echo
from .gpu import slot_json, slot_line
from .home import queue_of, site_of


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--limit", type=click.IntRange(0), default=STATUS_LISTED, show_default=True,
              help="List at most this many entries: the running and parked ones, then the oldest queued.")
@click.pass_context
def status(ctx: click.Context, as_json: bool, limit: int) -> None:
    """The queue: entries waiting or running, how many are in each state, the hosts and the GPU slots."""
    site = site_of(ctx)
    queue = queue_of(site)
    found = queue_status(queue.database, limit)
    gpus, hosts = queue.gpu_slots.all(), queue.hosts.all()
    disks, disk_bytes = store_bytes(DataDisks(site.layout.data_disks))
    copies, copy_bytes = queue.blobs.cache.kept() if queue.blobs.cache is not None else (0, 0)
    if as_json:
        echo(json.dumps({**found.as_json(), "gpus": [slot_json(g) for g in gpus],
                         "hosts": [host_json(h, site.queue.lease) for h in hosts],
                         "data_disks": {"count": disks, "bytes": disk_bytes},
                         **({"blob_copies": {"count": copies, "bytes": copy_bytes,
                                             "bound": site.storage.cache_bytes}}
                            if queue.blobs.cache is not None else {})}, indent=2))
        return
    for e in found.active:
        echo(f"{e.id:>6}  {e.state:<8} {e.stage or '':<6} {e.challenge:<16} {e.owner}")
    counts = found.counts
    echo(f"{found.waiting} waiting or running ({counts['running']} running, {counts['parked']} parked, "
         f"{counts['queued']} queued), {found.done} done")
    if found.unlisted:
        echo(f"{found.unlisted} more not listed: `vmjudge entries --state queued` pages them all, "
             "or `vmjudge status --limit N` lists more.")
    if disks:
        echo(f"data disks: {disks}, {disk_bytes / 1e6:.1f} MB in {site.layout.data_disks} (`vmjudge gc` removes "
             "those no challenge uses)")
    if queue.blobs.cache is not None:
        echo(f"this host's copies of the object store's blobs: {copies}, {copy_bytes / 1e6:.1f} MB of "
             f"{site.storage.cache_bytes / 1e6:.0f} MB ([storage] cache_gib; the least recently used go first)")
    for h in hosts:
        echo(host_line(h, site.queue.lease))
    for g in gpus:
        echo(slot_line(g))


def host_line(row: HostRow, lease: float) -> str:
    gpus = f", GPU slots {row.gpu_slots}" if row.gpu_slots else ""
    return (f"host {row.name}: {row.state(lease)}, {row.busy}/{row.slots + row.gpu_slots} slots busy{gpus}, "
            f"last heartbeat {row.last_heartbeat} (pid {row.pid}, started {row.started_at})")


def host_json(row: HostRow, lease: float) -> dict:
    return {"name": row.name, "state": row.state(lease), "busy": row.busy, "slots": row.slots,
            "gpu_slots": row.gpu_slots, "last_heartbeat": row.last_heartbeat, "pid": row.pid,
            "started_at": row.started_at}
