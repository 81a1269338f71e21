"""The leaderboard: each owner's best scored entry, ranked by its "score"; a tie goes to the
earlier submission. Late entries are ranked on a board of their own."""

from __future__ import annotations

from dataclasses import dataclass

from .queue.db import Queue


@dataclass(frozen=True)
class Row:
    rank: int
    owner: str
    entry_id: int
    score: float
    submitted_at: str


def leaderboard(queue: Queue, challenge: str, late: bool = False) -> list[Row]:
    best: dict[str, tuple[float, str, int]] = {}
    for e in queue.entries(("done",)):
        if e.challenge != challenge or e.late != late or e.outcome != "scored" or not e.scores:
            continue
        score = float(e.scores.get("score", 0.0))
        key = (-score, e.submitted_at, e.id)
        if e.owner not in best or key < (-best[e.owner][0], best[e.owner][1], best[e.owner][2]):
            best[e.owner] = (score, e.submitted_at, e.id)
    ordered = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[1][2]))
    return [Row(rank=i + 1, owner=owner, entry_id=eid, score=score, submitted_at=at)
            for i, (owner, (score, at, eid)) in enumerate(ordered)]


def as_text(challenge: str, rows: list[Row], late: bool = False) -> str:
    title = f"{challenge} {'late ' if late else ''}leaderboard"
    lines = [title, "=" * len(title), f"{'rank':>4}  {'score':>8}  {'entry':>6}  owner"]
    lines += [f"{r.rank:>4}  {r.score:>8.4f}  {r.entry_id:>6}  {r.owner}" for r in rows]
    if not rows:
        lines.append("(no scored entries yet)")
    return "\n".join(lines) + "\n"
