"""The site and the queue every subcommand works on: the home given by --home (or
VMJUDGE_HOME, or the default), its layout made ready before the queue is opened."""

from __future__ import annotations

import click

from ..config import Site, load_site
from ..images.data_disk import DataDisks
from ..queue.db import Queue
from ..queue.object_store import stored
from ..queue.shared_disks import shared_disks


def site_of(ctx: click.Context) -> Site:
    return load_site(ctx.find_root().obj)


def queue_of(site: Site) -> Queue:
    """The SQLite file in the home, or the PostgreSQL queue site.toml's [queue] url names."""
    site.layout.ensure()
    return Queue(site.queue.url or site.layout.queue_db, host=site.queue.host, lease=site.queue.lease,
                 fair_window=site.queue.fair_window, stored=stored(site.storage))


def site_and_queue(ctx: click.Context) -> tuple[Site, Queue]:
    site = site_of(ctx)
    return site, queue_of(site)


def data_disks_of(site: Site, queue: Queue | None = None) -> DataDisks:
    """The home's data disks, with those of the object store when [storage] has one."""
    if site.storage.url is None:
        return DataDisks(site.layout.data_disks)
    return DataDisks(site.layout.data_disks, shared_disks((queue or queue_of(site)).blobs))
