"""What a slot may take, and the claim's walk over the owners in fair order (claim.py's SQL run
inside the claim's transaction): out of db.py, which is the queue's state changes."""

from __future__ import annotations

from typing import Any

from ..pipeline import VM_STAGES
from .claim import heads, take, take_first
from .connection import Db
from .fair_share import USAGE_BY_OWNER, usage_args

# A stage needs a GPU slot when its challenge asks for a GPU and it runs in a VM (stage 4,
# on the host, needs none: a GPU challenge's scoring never waits for a card).
NEEDS_GPU = f"(c.gpu IS NOT NULL AND e.stage IN ({', '.join(repr(n) for n in VM_STAGES)}))"


def slot_filter(gpu: tuple[str, ...] | None) -> tuple[str, tuple[str, ...]]:
    """SQL (on entries e joined with challenges c) for what one kind of slot may take: a CPU
    slot (gpu None) every stage that needs no GPU, and nothing else, so a CPU slot never runs
    GPU work and GPU work never waits behind CPU work in a GPU slot; a GPU slot only stages
    that need a GPU, of a model among `gpu` ("any", "t4")."""
    if gpu is None:
        return f" AND NOT {NEEDS_GPU}", ()
    return f" AND {NEEDS_GPU} AND c.gpu IN ({','.join('?' * len(gpu))})", gpu


def in_list(column: str, values: tuple[Any, ...]) -> str:
    return f"{column} IN ({','.join('?' * len(values))})" if values else "1 = 0"


def take_fairly(db: Db, skip_locked: str, host: str, lease: float, fair_window: float, where: str,
                args: tuple[Any, ...], at: float, skip_first: bool = False) -> Any:
    """Within the claim's transaction: the owners' heads in fair order (above), participants'
    work before the organiser's batch, and the first one that can still be taken; None.
    `skip_first`: the participants' take_first was just tried, alone (one_statement.py)."""
    usage = usage_args(at, fair_window)
    for batch in (0, 1):
        if not (skip_first and batch == 0):
            row = db.execute(take_first(where, USAGE_BY_OWNER, skip_locked),
                             (batch, *usage, batch, at, *args, host, at + lease, batch, at, *args)).fetchone()
            if row is not None:
                return row
        owners = db.execute(heads(where, USAGE_BY_OWNER, False), (batch, *usage, batch, at, *args))
        for owner in owners.fetchall():  # the least-used owners have none to give: every owner in turn
            if owner["head"] is None:  # nothing of this owner's that this slot may run now
                continue
            row = db.execute(take(where, skip_locked),
                             (host, at + lease, batch, owner["owner"], at, *args)).fetchone()
            if row is not None:
                return row
    return None

