"""Which of each host's GPUs are lent to VMs: the state `status` shows and the daemon obeys.

A card that failed its preflight, would not start in a VM or did not work inside one is taken
out of service here and stays out, across daemon restarts, until the organiser has looked at it
and puts it back (`vmjudge gpu enable`): a card stuck after a failed reset would otherwise fail
stage after stage, each a retry that costs a VM run. Kept in the queue's database, not in the
daemon, so that `vmjudge status`, another process, reads what the daemon decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from .connection import Database
from .outbox import organiser_event
from .rows import now


@dataclass(frozen=True)
class GpuSlotRow:
    host: str
    address: str
    in_service: bool
    reason: str | None  # why it is out of service
    changed_at: str


class GpuSlots:
    def __init__(self, database: Database):
        self.database = database

    def register(self, host: str, addresses: tuple[str, ...]) -> list[GpuSlotRow]:
        """The daemon's GPUs as site.toml lists them now: new ones in service, ones no longer
        listed forgotten, the others as they were (out of service stays out). Returns them."""
        with self.database.transaction() as db:
            for address in addresses:
                db.execute("INSERT INTO gpu_slots (host, address, in_service, changed_at) VALUES (?, ?, 1, ?) "
                           "ON CONFLICT(host, address) DO NOTHING", (host, address, now()))
            kept = f" AND address NOT IN ({','.join('?' * len(addresses))})" if addresses else ""  # () is not SQL
            db.execute("DELETE FROM gpu_slots WHERE host = ?" + kept, (host, *addresses))
        return [s for s in self.all() if s.host == host]

    def all(self) -> list[GpuSlotRow]:
        with self.database.connect() as db:
            rows = db.execute("SELECT * FROM gpu_slots ORDER BY host, address").fetchall()
        return [GpuSlotRow(r["host"], r["address"], bool(r["in_service"]), r["reason"], r["changed_at"])
                for r in rows]

    def in_service(self, host: str, address: str) -> bool:
        with self.database.connect() as db:
            row = db.execute("SELECT in_service FROM gpu_slots WHERE host = ? AND address = ?",
                             (host, address)).fetchone()
        return row is not None and bool(row["in_service"])

    def take_out(self, host: str, address: str, reason: str) -> None:
        self._set(host, address, False, reason)

    def put_back(self, host: str, address: str) -> bool:
        """In service again; False when this host has no such GPU slot."""
        return self._set(host, address, True, None)

    def _set(self, host: str, address: str, in_service: bool, reason: str | None) -> bool:
        with self.database.transaction() as db:
            cur = db.execute("UPDATE gpu_slots SET in_service = ?, reason = ?, changed_at = ? "
                             "WHERE host = ? AND address = ?", (int(in_service), reason, now(), host, address))
            if cur.rowcount != 1:
                return False
            db.execute("INSERT INTO events (entry_id, at, kind, detail) VALUES (NULL, ?, 'gpu', ?)",
                       (now(), f"{host} GPU {address} " + ("back in service" if in_service
                                                            else f"out of service: {reason}")))
            condition = f"gpu {host} {address}"
            if in_service:  # "back to normal", told once the condition was
                organiser_event(db, condition, f"GPU {address} of {host}", f"GPU {address} of {host} is back in "
                                "service.", kind="gpu-back")
            else:
                organiser_event(db, condition, f"GPU {address} of {host}", f"GPU {address} of {host} was taken out "
                                f"of service: {reason}. `vmjudge gpu enable` puts it back once it is looked at.",
                                kind="gpu-out")
        return True
