"""What the daemon tells the organiser as it goes: a line when a stage starts and when it ends,
and a summary when it stops. Without them a daemon evaluating sixteen entries printed nothing
for five minutes.

The end of a stage is read back from the queue (the stage run run_stage recorded), so the line
says what was recorded, not what the daemon guessed. Owner and challenge names come from
submitters: the caller's `write` escapes them (cli/echo.py).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from ..queue.db import Queue
from ..queue.rows import EntryRow
from .slots import Slot

ENDED = {"passed": "passed", "scored": "scored", "dry-run": "dry run: the evaluation ends here"}


class Progress:
    def __init__(self, queue: Queue, write: Callable[[str], None]):
        self.queue, self.write = queue, write
        self.began = time.monotonic()
        self.outcomes: Counter[str] = Counter()
        self.stages = 0

    def _line(self, entry: EntryRow, text: str) -> None:
        self.write(f"{time.strftime('%H:%M:%S')} entry {entry.id} ({entry.owner}, {entry.challenge}) "
                   f"{entry.stage}: {text}")

    def started(self, slot: Slot, entry: EntryRow) -> None:
        self._line(entry, f"started in {slot}")

    def ended(self, slot: Slot, entry: EntryRow, seconds: float) -> None:
        self.stages += 1
        runs = [r for r in self.queue.stage_runs(entry.id) if r.stage == entry.stage]
        run = runs[-1] if runs else None
        now = self.queue.entry(entry.id)
        if run is None or run.status is None:  # a crash of ours: the log said so; the next daemon runs it again
            what = "stopped without a result (see the log above); it runs again when the daemon restarts"
        elif run.status == "failed":
            what = f"failed ({run.reason})"
        elif run.status == "infra":
            what = f"infrastructure failure ({run.reason}): " + (
                "parked for the organiser" if now.state == "parked" else "it runs again shortly")
        elif run.status == "cancelled":
            what = "abandoned, the daemon is stopping: it runs again when the daemon restarts"
        else:
            what = ENDED.get(run.status, run.status)
        self._line(entry, f"{what} in {slot} after {seconds:.1f} s")
        if now.state == "done":
            self.outcomes[str(now.outcome)] += 1
        elif now.state == "parked":
            self.outcomes["parked"] += 1

    def summary(self) -> None:
        ended = sum(self.outcomes.values())
        by = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.outcomes.items()))
        self.write(f"{time.strftime('%H:%M:%S')} {ended} {'entry' if ended == 1 else 'entries'} ended"
                   + (f" ({by})" if by else "") + f", {self.stages} stages run, in "
                   f"{time.monotonic() - self.began:.0f} s")
