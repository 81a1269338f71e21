"""The site and the queue every subcommand works on: the home given by --home (or
VMJUDGE_HOME, or the default), its layout made ready before the queue is opened."""

from __future__ import annotations

import click

from ..config import Site, load_site
from ..queue.db import Queue


def site_of(ctx: click.Context) -> Site:
    return load_site(ctx.find_root().obj)


def queue_of(site: Site) -> Queue:
    site.layout.ensure()
    return Queue(site.layout.queue_db)


def site_and_queue(ctx: click.Context) -> tuple[Site, Queue]:
    site = site_of(ctx)
    return site, queue_of(site)
