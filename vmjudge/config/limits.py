"""challenge.toml's [limits], and a phase's [phase.limits] over them: how long and how much an
entry's stages may take, and what one owner may use.

A contest's phases share the challenge's limits unless a phase says otherwise (a test phase
of 400 cases needs a longer exam than a sanity check of 3), so one reader serves both, with
the challenge's own values as the defaults of a phase's table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .values import Section

SECONDS = "seconds from 1 to 604800"


@dataclass(frozen=True)
class StageLimits:
    """Seconds and bytes; PhysioNet's values are the defaults."""

    setup: float = 300.0
    per_record: float = 40.0
    quiz_total: float = 4100.0
    exam_total: float = 3600.0
    score: float = 900.0  # an evaluation container's run over one entry's cases ([score] kind = "container")
    output: int = 1 << 20  # bytes of each command's output kept from its start (the head)
    output_tail: int = 64 << 10  # and from its end (the tail)
    stage_output: int = 64 << 20  # bytes of output a stage's log keeps, all its commands together
    # bytes of result files one stage keeps (style "files"); a file beyond it is not kept and
    # that record gets no answer
    stage_results: int = 256 << 20
    # VM hours each owner may use on each board (official, late): a budget beside the entry
    # count; None: no budget. In a contest with phases, on each board of each phase.
    vm_hours: float | None = None
    # What one owner may do to this challenge through the portal (vmjudge web; `vmjudge submit`
    # is the organiser's and is held to none of these), on both boards together, each checked
    # before an upload's body is stored and again in the transaction that queues it. On by
    # default, at what a public contest would want: an entry takes minutes of VM time to judge,
    # and its archive stays in the spool for good (re-scoring and re-running need it).
    # Entries accepted in any hour, counted from the queue's entries.
    submissions_per_hour: int = 10
    # Entries waiting or running at once (dry runs included: they run VMs too).
    pending_per_owner: int = 3
    # Bytes of archives the owner's entries keep in the spool, all of them ever accepted.
    spool_bytes_per_owner: int = 1 << 30
    # Dry runs (smoke tests: DrivenData's name) accepted in any 24 hours: they never score, so the entry
    # limit leaves them out, and run VMs all the same.
    smoke_tests_per_day: int = 10


def stage_limits(source: str, table: str, data: Any, base: StageLimits = StageLimits()) -> StageLimits:
    """The table `table` (e.g. "limits", or "phase test.limits") read over `base`: a key left
    out keeps base's value."""
    sec = Section(source, table, data)

    def secs(key: str) -> float:
        return sec.get(key, float, getattr(base, key), lambda v: 1 <= v <= 604800, SECONDS)

    def count(key: str, low: int, high: int, allowed: str) -> int:
        return sec.get(key, int, getattr(base, key), lambda v: low <= v <= high, allowed)

    limits = StageLimits(setup=secs("setup"), per_record=secs("per_record"), quiz_total=secs("quiz_total"),
                         exam_total=secs("exam_total"), score=secs("score"),
                         output=count("output", 1024, 1 << 30, "bytes from 1024 to 1073741824"),
                         output_tail=count("output_tail", 0, 1 << 30, "bytes from 0 to 1073741824"),
                         stage_output=count("stage_output", 1024, 1 << 40, "bytes from 1024 to 1099511627776"),
                         stage_results=count("stage_results", 1024, 1 << 40, "bytes from 1024 to 1099511627776"),
                         vm_hours=sec.get("vm_hours", float, base.vm_hours, lambda v: 0 < v <= 100000,
                                          "hours from 0 to 100000, or leave the key out for no budget"),
                         submissions_per_hour=count("submissions_per_hour", 1, 100000,
                                                    "a whole number from 1 to 100000"),
                         pending_per_owner=count("pending_per_owner", 1, 100000, "a whole number from 1 to 100000"),
                         spool_bytes_per_owner=count("spool_bytes_per_owner", 1, 1 << 50,
                                                     "a number of bytes from 1 to 1125899906842624"),
                         smoke_tests_per_day=count("smoke_tests_per_day", 0, 100000, "a whole number from 0 to 100000"))
    sec.done()
    return limits
