"""`vmjudge gc`: what finished entries keep on disk, bounded by site.toml's [retention].

Besides its reports and logs, an entry's results directory holds files only its evaluation
needed: the unpacked entry and install trees, the home disk (and any overlay a crash left
beside it), the VM console logs and, with keep_media, the stages' ISOs. These are by far the
biggest. Once the entry is done (not parked: it may still be run again from the stage it
was parked at) and its last event is older than the policy's days
for that kind of file, they may go. Nothing re-scoring or re-running needs is touched: stage
3's results live in HOME/archive, the entry's archive in HOME/spool, and `rescore
--rerun-stages` starts again from the spool archive, unpacking it and making a new home disk.

An entry queued or running is never touched: each entry's files are removed under the
queue's write lock, after checking the entry is still finished and idle (Queue.collect), so
the daemon cannot take it up meanwhile. Each removal is recorded in the entry's event log,
which `show --organiser` prints.

The outbox's notifications that ended (sent, failed or dropped) go too once `outbox_days` have
passed since they ended: on a busy contest they are a row per judged entry, and only `notify
list` reads them. A message still to be sent is never removed (queue/outbox.py prune).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..config import Retention, Site
from .db import Queue
from .outbox import prune
from .rows import stamp

DAY = 86400.0
# Each kind of file the policy bounds (Retention's `<kind>_days`), by name in results/ID.
KINDS: dict[str, tuple[str, ...]] = {
    "entry_tree": ("entry", "install"),
    "home_disk": ("*.qcow2",),  # home.qcow2, and the quiz or exam overlay a crash left
    "console_log": ("console-*.log", "console-*.log.*"),  # and virtlogd's rotated copies of a long one
    "media": ("*.iso",),
}


@dataclass(frozen=True)
class Removal:
    """One file or tree of an entry's results that the policy lets go."""

    entry_id: int
    kind: str
    name: str  # in HOME/results/ID
    bytes: int  # the disk space it takes
    days: int  # the policy's days for its kind

    def detail(self) -> str:
        """What the entry's event log says of it."""
        return f"removed {self.name} ({_size(self.bytes)}): [retention] {self.kind}_days = {self.days}"


@dataclass
class GcReport:
    dry_run: bool
    policy: Retention
    removals: list[Removal] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one sentence each: what could not be removed
    messages: int = 0  # the outbox's finished notifications removed (outbox_days)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removals)

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        lines = [f"entry {r.entry_id}: {verb} {r.name} ({_size(r.bytes)}, {r.kind}_days = {r.days})"
                 for r in self.removals]
        if self.policy.outbox_days is not None:
            lines.append(f"notifications: {verb} {self.messages} sent, failed or dropped more than "
                         f"{self.policy.outbox_days} days ago (outbox_days = {self.policy.outbox_days})")
        return lines

    def summary(self) -> str:
        if all(v is None for v in asdict(self.policy).values()):
            return "site.toml has no [retention] days: nothing is removed, ever."
        entries = len({r.entry_id for r in self.removals})
        if self.dry_run:
            return f"would remove {len(self.removals)} items of {entries} entries, freeing {_size(self.bytes)}"
        return f"removed {len(self.removals)} items of {entries} entries, {_size(self.bytes)} freed"

    def as_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "policy": asdict(self.policy), "bytes": self.bytes,
                "removed": [asdict(r) for r in self.removals], "problems": self.problems,
                "notifications": self.messages}


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def disk_usage(path: Path) -> int:
    """Bytes of disk a file or tree takes (allocated blocks: a qcow2 disk is sparse)."""
    st = path.lstat()
    total = st.st_blocks * 512
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def plan(site: Site, entry_id: int, last_event: str, now: float) -> list[Removal]:
    """What the policy lets go of one finished entry whose last event was at `last_event`."""
    results = site.layout.results_of(entry_id).directory
    found = []
    for kind, patterns in KINDS.items():
        days = getattr(site.retention, f"{kind}_days")
        if days is None or last_event >= stamp(now - days * DAY) or not results.is_dir():
            continue
        names = sorted({p.name for pattern in patterns for p in results.glob(pattern)})
        found += [Removal(entry_id, kind, name, disk_usage(results / name), days) for name in names]
    return found


def _remove(site: Site, planned: list[Removal], problems: list[str], removed: list[Removal]) -> list[str]:
    """Delete what was planned; add what went to `removed`, and describe it for the event log."""
    for r in planned:
        path = site.layout.results_of(r.entry_id).directory / r.name
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError as exc:
            problems.append(f"entry {r.entry_id}: could not remove {path} ({exc.strerror or exc}): check the "
                            "file and run `vmjudge gc` again.")
            continue
        removed.append(r)
    return [r.detail() for r in removed]


def collect(site: Site, queue: Queue, dry_run: bool = False, now: float | None = None) -> GcReport:
    """Remove (or, dry_run, list) what site.retention lets finished entries lose."""
    now = time.time() if now is None else now
    report = GcReport(dry_run, site.retention)
    for entry_id, last_event in queue.finished_entries().items():
        planned = plan(site, entry_id, last_event, now)
        if dry_run:
            report.removals += planned
        elif planned:
            removed: list[Removal] = []
            # Nothing is removed when the entry moved on since it was listed (queued again, say).
            queue.collect(entry_id, last_event, partial(_remove, site, planned, report.problems, removed))
            report.removals += removed
    if site.retention.outbox_days is not None:
        report.messages = prune(queue.database, now - site.retention.outbox_days * DAY, now, dry_run)
    return report
