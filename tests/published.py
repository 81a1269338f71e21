"""Waiting for what the judge publishes: participants see an entry's exam, and everything
after it, only from its publish time (vmjudge/queue/publish.py), a tenth of the exam's cap
or so after the daemon recorded it. Tests that read participants' documents once a daemon
has finished wait for that moment, the condition itself, rather than a guessed time."""

from __future__ import annotations

import time
from pathlib import Path

from vmjudge.config import load_site
from vmjudge.queue.db import Queue

# The longest a test waits: the examples' exams are capped at 60 s, so their step is 6 s; a
# result ready late is published at the next step after it.
LONGEST_WAIT = 120.0


def wait_until_published(home: Path) -> float:
    """Return once every entry of `home` whose exam started is published (its publish time has
    passed); the seconds waited. Fails if an ended entry has no publish time."""
    site = load_site(home)
    queue = Queue(site.queue.url or site.layout.queue_db, host=site.queue.host)
    entries = [e for e in queue.entries(("done", "parked")) if e.exam_started is not None]
    missing = [e.id for e in entries if e.published is None]
    assert not missing, f"entries {missing} ended after their exam started but have no publish time"
    last = max((e.published or 0.0 for e in entries), default=0.0)
    wait = last - time.time()
    assert wait < LONGEST_WAIT, f"the last publish time is {wait:.0f} s away"
    if wait > 0:
        time.sleep(wait)  # until the condition's own moment, computed above
    return max(wait, 0.0)
