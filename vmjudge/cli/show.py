"""`vmjudge show`: one entry's report, as the organiser reads it."""

from __future__ import annotations

import time

import click

from ..queue.db import Queue
from ..reports import participant, report
from ..vm.hardware import line as hardware_line
from .echo import echo
from .home import queue_of, site_of


@click.command()
@click.argument("entry_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@click.option("--organiser", is_flag=True, help="Add every attempt, manifests and internal logs.")
@click.option("--wait", is_flag=True, help="If the exam's outcome waits for its publish time, wait for it first.")
@click.pass_context
def show(ctx: click.Context, entry_id: int, as_json: bool, organiser: bool, wait: bool) -> None:
    """The report for ENTRY_ID."""

    site = site_of(ctx)
    queue = queue_of(site)
    if wait:
        _until_published(queue, entry_id)
    doc = report.show(site, queue, entry_id, organiser=organiser)
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
    it started, queue/publish.py); until then `show` says "being examined". A container entry's stage 1
    is likewise published a whole step after it started. An organiser who has just run the daemon,
    or a script, waits for that moment rather than guessing it."""
    while participant.withheld(entry := queue.entry(entry_id), now := participant.now()):
        time.sleep(min(5.0, entry.published - now) if entry.published is not None else 1.0)
