"""`vmjudge gc` for container entries' roots (HOME/entry-roots/RULES/CHAIN.squashfs, made by
entry_root.py): a root no entry still to be judged names, and unused for `[retention]
entry_root_days`, is removed with its record and lock file. A root is a few hundred MB per image,
and content addressing keeps it after its entries are done in case the same layers come again;
this bounds how long.

Never a root a stage needs:
- An entry not yet done (queued, running, or parked, which the organiser may run again from the
  stage it stopped at) names its root in its files (root_use.py); every such root is kept.
- Stage 1 holds the root's lock from finding (or making) it until its entry's record is written,
  and touches the root's record under it (entry_root.held_root). gc lists the entries' records,
  then takes each candidate root's lock without waiting (a root locked now is at work: kept),
  and keeps it if its record was touched since the listing began: a use the listing may have
  missed. What it removes, it removes under that lock, the lock file last; a stage 1 waiting for
  the lock then finds no root and makes it again (entry_root.root_lock takes the new lock file).
- The quiz and the exam find the root by their entry's record, which keeps it.
A stage 1 work directory a crash left (.work-CHAIN-*) is removed under its root's lock too.

With several hosts each host keeps its own roots, and an entry's stages run on the host that
holds its files, where its record is.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import Site
from ..queue.db import Queue
from .entry_root import lock_path, root_lock
from .root_tools import remove_tree
from .root_use import RootUse

DAY = 86400.0
SLACK = 2.0  # seconds: a file's time may lag the clock it is compared with (the kernel's coarse clock)
UNDONE = ("queued", "running", "parked")


@dataclass(frozen=True)
class RootRemoval:
    """One root (or what a crash left of one) that gc removed, or would."""

    name: str  # under HOME/entry-roots, e.g. v1/<chain ID>.squashfs
    bytes: int
    unused_days: float

    def line(self, dry_run: bool, days: int) -> str:
        verb = "would remove" if dry_run else "removed"
        return (f"entry root {self.name}: {verb} ({self.bytes / 1e6:.1f} MB, unused for {self.unused_days:.1f} days, "
                f"entry_root_days = {days})")


@dataclass
class RootGc:
    dry_run: bool
    days: int | None
    removals: list[RootRemoval] = field(default_factory=list)
    in_use: int = 0  # roots an entry not yet done names
    busy: int = 0  # roots whose lock a stage 1 held: at work now
    problems: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removals)

    def lines(self) -> list[str]:
        return [r.line(self.dry_run, self.days or 0) for r in self.removals]

    def summary(self) -> str | None:
        if self.days is None:
            return None
        verb = "would remove" if self.dry_run else "removed"
        return (f"entry roots: {verb} {len(self.removals)}, {self.bytes / 1e6:.1f} MB; kept {self.in_use} that "
                f"entries not yet done use and {self.busy} in use by a stage 1 now")

    def as_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "entry_root_days": self.days, "bytes": self.bytes, "in_use": self.in_use,
                "busy": self.busy, "removed": [asdict(r) for r in self.removals], "problems": self.problems}


def needed_roots(site: Site, queue: Queue) -> set[Path]:
    """The squashfs files that entries not yet done name in their records. A record that cannot be
    read names nothing: stage 1 writes it whole (durably) or not at all, and an entry without one
    has not yet got past the point where it holds its root's lock."""
    needed = set()
    for entry in queue.entries(UNDONE):
        try:
            needed.add(RootUse.read(site.layout.results_of(entry.id).entry_root).squashfs.resolve())
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return needed


def _disk(path: Path) -> int:
    try:
        return path.lstat().st_blocks * 512
    except OSError:
        return 0


def _last_use(squashfs: Path) -> float | None:
    """When the root was last used: its record's time (touched at each use), else its own."""
    for path in (squashfs.with_suffix(".json"), squashfs):
        try:
            return path.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
    return None


def _names(store: Path) -> list[Path]:
    """Every root of a rules directory, by its squashfs path, whether or not the squashfs is there
    (a record, a lock file or a crash's work directory left alone counts too)."""
    stems = set()
    for p in store.iterdir():
        name = p.name
        if name.endswith((".squashfs", ".json")) and not name.startswith("."):
            stems.add(name.rsplit(".", 1)[0])
        elif name.startswith(".") and name.endswith(".lock"):
            stems.add(name[1:-len(".lock")])
        elif name.startswith(".work-"):
            stems.add(name[len(".work-"):].rsplit("-", 1)[0])
    return [store / f"{stem}.squashfs" for stem in sorted(stems) if stem]


def _remove(squashfs: Path) -> int:
    """Remove the root's files (its lock's holder calls this): the squashfs first, so that a record
    left by a failure finds no root and a root is never found without its record; the lock file last."""
    freed = 0
    for work in squashfs.parent.glob(f".work-{squashfs.stem}-*"):
        freed += _disk(work)
        remove_tree(work)
    for path in (squashfs, squashfs.with_suffix(".json"), lock_path(squashfs)):
        freed += _disk(path)
        path.unlink(missing_ok=True)
    return freed


def collect_roots(site: Site, queue: Queue, dry_run: bool = False, now: float | None = None) -> RootGc:
    """Remove (or, dry_run, list) the roots site.retention.entry_root_days lets go; see the docstring."""
    days = site.retention.entry_root_days
    report = RootGc(dry_run, days)
    base = site.layout.entry_roots
    if days is None or not base.is_dir():
        return report
    listed = time.time() - SLACK  # before the listing: a use after it is seen by its time
    now = time.time() if now is None else now
    needed = needed_roots(site, queue)
    for store in sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink() and p.name[:1] != "."):
        for squashfs in _names(store):
            last = _last_use(squashfs)
            if squashfs.resolve() in needed:
                report.in_use += 1
                continue
            if last is not None and last > now - days * DAY:
                continue
            if dry_run:  # nothing is locked, nor made: what a stage 1 at work holds may be listed
                report.removals.append(RootRemoval(str(squashfs.relative_to(base)), _disk(squashfs) + _disk(
                    squashfs.with_suffix(".json")), round((now - last) / DAY if last is not None else 0.0, 1)))
                continue
            try:
                with root_lock(lock_path(squashfs), wait=False) as held:
                    if not held:
                        report.busy += 1
                        continue
                    again = _last_use(squashfs)
                    if again is not None and again >= listed:
                        report.in_use += 1  # used since the listing began: an entry the listing missed
                        continue
                    unused = (now - last) / DAY if last is not None else 0.0
                    size = _remove(squashfs)
                    report.removals.append(RootRemoval(str(squashfs.relative_to(base)), size, round(unused, 1)))
            except OSError as exc:
                report.problems.append(f"could not remove the entry root {squashfs} ({exc.strerror or exc}): check "
                                       "the file and run `vmjudge gc` again.")
    return report
