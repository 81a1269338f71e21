"""Waiting for what the judge publishes: participants see an entry's exam, and everything
after it, only from its publish time (vmjudge/queue/publish.py), a tenth of the exam's cap
or so after the daemon recorded it; and a container entry's stage 1 a whole step after it
started. Tests that read participants' documents once a daemon has finished wait for that,
polling the participant view's own condition."""

from __future__ import annotations

from pathlib import Path

from vmjudge.config import load_site
from vmjudge.queue.db import Queue
from vmjudge.reports import participant

from .waiting import wait_for

# The longest a test waits: the examples' exams are capped at 60 s, so their step is 6 s; a
# result ready late is published at the next step after it.
LONGEST_WAIT = 120.0


def wait_until_published(home: Path) -> None:
    """Return once no entry of `home` that has ended is still "being examined" for participants,
    nor in a container's stage 1 not yet published (a step after it started, publish.PREP_STEP).
    Fails if an entry ended after its exam started with no publish time."""
    site = load_site(home)
    queue = Queue(site.queue.url or site.layout.queue_db, host=site.queue.host)
    ended = [e for e in queue.entries(("done", "parked")) if e.exam_started is not None or e.published is not None]
    missing = [e.id for e in ended if e.published is None]
    assert not missing, f"entries {missing} ended after their exam started but have no publish time"
    wait_for(lambda: not any(participant.withheld(e, participant.now()) for e in ended), LONGEST_WAIT,
             f"the publish times of entries {[e.id for e in ended]}")
