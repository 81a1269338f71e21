"""When a stage that the infrastructure broke is tried again, and when the entry is parked.

The queue records failures; deciding what they mean is policy, kept here so that it can
change (or be read) without going through the storage.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_INFRA_ATTEMPTS = 3
# Seconds before a stage that the infrastructure broke is tried again, by failures so far:
# long enough for a restarting libvirtd or a passing disk-space problem to clear.
RETRY_DELAYS = (10.0, 60.0)


@dataclass(frozen=True)
class Retry:
    """What follows an infrastructure failure: run the stage again after `delay` seconds,
    or (`again` False) park the entry for the organiser."""

    again: bool
    delay: float


def after_infra_failure(failures: int) -> Retry:
    """The decision once a stage has failed `failures` times (this one included) for the
    infrastructure in the entry's current evaluation: again, unless it has failed
    MAX_INFRA_ATTEMPTS times."""
    if failures < MAX_INFRA_ATTEMPTS:
        return Retry(again=True, delay=RETRY_DELAYS[min(failures, len(RETRY_DELAYS)) - 1])
    return Retry(again=False, delay=0.0)
