"""`vmjudge gc` and `vmjudge status` for the data disks (HOME/data-disks, images/data_disk.py).

A disk is kept while a registered challenge's record set names it: the caller passes the keys
the sets give now (DataDisks.known_key, which reads no file). Any other disk is removed under its
lock taken without waiting: a disk some run holds (its lock shared from finding the disk until its
VM is gone) is busy and kept. Its lock file goes with it, and what remembered it (.known/), and
what a crash left of a disk being made (.work/KEY.iso) once no one makes that disk.
"""

from __future__ import annotations

import fcntl
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .data_disk import KEY_RE, SUFFIX, WORK, DataDisks


@dataclass(frozen=True)
class DiskRemoval:
    name: str
    bytes: int


@dataclass
class DataDiskGc:
    dry_run: bool
    removals: list[DiskRemoval] = field(default_factory=list)
    in_use: int = 0  # disks a registered challenge's record set names
    busy: int = 0  # disks a run holds now
    problems: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removals)

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        return [f"data disk {r.name}: {verb} ({r.bytes / 1e6:.1f} MB; no registered challenge's record set is it)"
                for r in self.removals]

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        return (f"data disks: {verb} {len(self.removals)}, {self.bytes / 1e6:.1f} MB; kept {self.in_use} that "
                f"challenges use and {self.busy} a run holds now")

    def as_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "bytes": self.bytes, "in_use": self.in_use, "busy": self.busy,
                "removed": [asdict(r) for r in self.removals], "problems": self.problems}


def collect_data_disks(disks: DataDisks, keep: set[str], dry_run: bool) -> DataDiskGc:
    found = DataDiskGc(dry_run)
    if not disks.store.is_dir():
        return found
    for path, key in _disks(disks):
        if key in keep:
            found.in_use += 1
            continue
        with open(disks.lock_path(key), "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                found.busy += 1
                continue
            try:
                size = path.stat().st_size
                if not dry_run:
                    path.unlink()
                    disks.lock_path(key).unlink()  # under the lock: a run that waited for it takes a new one
            except OSError as exc:
                found.problems.append(f"data disk {path.name} could not be removed: {exc}")
                continue
            found.removals.append(DiskRemoval(path.name, size))
    if not dry_run:
        _leftovers(disks)
    return found


def _leftovers(disks: DataDisks) -> None:
    """What remembered a removed disk, and the half-made disks of makings a crash broke off."""
    for known in (disks.store / ".known").glob("*"):
        try:
            if not disks.disk_path(known.read_text().strip()).is_file():
                known.unlink()
        except OSError:
            continue
    for work in (disks.store / WORK).glob("*"):
        key = work.name[:64]
        if not KEY_RE.fullmatch(key):
            continue
        with open(disks.lock_path(key), "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being made now
            work.unlink(missing_ok=True)
            if not disks.disk_path(key).is_file():
                disks.lock_path(key).unlink(missing_ok=True)


def _disks(disks: DataDisks) -> list[tuple[Path, str]]:
    """The store's disks, by their names alone (a disk being made is in the work directory, not here)."""
    found = [(p, p.name[:-len(SUFFIX)]) for p in disks.store.glob("*" + SUFFIX)] if disks.store.is_dir() else []
    return sorted((p, k) for p, k in found if KEY_RE.fullmatch(k))


def store_bytes(disks: DataDisks) -> tuple[int, int]:
    """(disks, bytes) in the store, for `vmjudge status`."""
    sizes = []
    for path, _ in _disks(disks):
        try:
            sizes.append(path.stat().st_size)
        except FileNotFoundError:  # removed by gc meanwhile
            continue
    return len(sizes), sum(sizes)
