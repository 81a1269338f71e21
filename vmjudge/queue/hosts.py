"""The daemons that share the queue: one row per host, renewed by its heartbeat.

`vmjudge status` reads here which hosts are up, and the other daemons when a host that holds
home disks is gone (leases.py). A daemon registers under site.toml's [queue] host; a second
daemon under a name that a live one holds is refused, since two hosts of one name would take
each other's claims for their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import VmjudgeError
from .connection import Database
from .rows import now, stamp


@dataclass(frozen=True)
class HostRow:
    name: str
    machine: str
    pid: int
    slots: int
    gpu_slots: int
    busy: int
    started_at: str
    heartbeat: float  # epoch seconds
    stopped: bool

    def state(self, lease: float, at: float | None = None) -> str:
        """up, stopped (on purpose) or down (no heartbeat for longer than a lease)."""
        if self.stopped:
            return "stopped"
        return "up" if (at if at is not None else time.time()) - self.heartbeat <= lease else "down"

    @property
    def last_heartbeat(self) -> str:
        return stamp(self.heartbeat)


class Hosts:
    def __init__(self, database: Database):
        self.database = database

    def register(self, name: str, machine: str, pid: int, slots: int, gpu_slots: int, lease: float,
                 alive: Callable[[int], bool]) -> None:
        """This daemon, starting. Refused while another daemon of this name lives: one that
        heartbeated within a lease and runs on another machine, or on this one with a live pid."""
        with self.database.transaction() as db:
            row = db.execute("SELECT * FROM hosts WHERE name = ?" + self.database.dialect.for_update,
                             (name,)).fetchone()
            live = row is not None and not row["stopped"] and time.time() - row["heartbeat"] <= lease
            if live and row["pid"] != pid and (row["machine"] != machine or alive(int(row["pid"]))):
                raise VmjudgeError(f"another vmjudge daemon is running as host {name!r} (pid {row['pid']}, last "
                                   f"heartbeat {stamp(row['heartbeat'])}): stop it, or give each host its own "
                                   "[queue] host in site.toml.")
            db.execute("INSERT INTO hosts (name, machine, pid, slots, gpu_slots, busy, started_at, heartbeat, stopped) "
                       "VALUES (?, ?, ?, ?, ?, 0, ?, ?, 0) ON CONFLICT(name) DO UPDATE SET machine = excluded.machine, "
                       "pid = excluded.pid, slots = excluded.slots, gpu_slots = excluded.gpu_slots, busy = 0, "
                       "started_at = excluded.started_at, heartbeat = excluded.heartbeat, stopped = 0",
                       (name, machine, pid, slots, gpu_slots, now(), time.time()))

    def heartbeat(self, name: str, busy: int) -> None:
        with self.database.transaction() as db:
            db.execute("UPDATE hosts SET heartbeat = ?, busy = ? WHERE name = ?", (time.time(), busy, name))

    def stop(self, name: str) -> None:
        with self.database.transaction() as db:
            db.execute("UPDATE hosts SET stopped = 1, busy = 0, heartbeat = ? WHERE name = ?", (time.time(), name))

    def all(self) -> list[HostRow]:
        with self.database.connect() as db:
            rows = db.execute("SELECT * FROM hosts ORDER BY name").fetchall()
        return [HostRow(name=r["name"], machine=r["machine"], pid=int(r["pid"]), slots=int(r["slots"]),
                        gpu_slots=int(r["gpu_slots"]), busy=int(r["busy"]), started_at=r["started_at"],
                        heartbeat=float(r["heartbeat"]), stopped=bool(r["stopped"])) for r in rows]
