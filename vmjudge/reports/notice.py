"""What a participant's notification says (issue 35), built from the participant view only.

A message is one more document a participant receives, so it is held to the same rules as
the others (participant.py): it is made from the allow-listed line of "my entries"
(participant.entry_row: verdict and score, at the entry's phase's feedback level), seen at the
moment it is sent, and never before the entry's publish time. Before then the entry is "being
examined" (or, a container entry, still in stage 1) to every participant document, and None is
returned: the sender tries again later, so when a message arrives tells no more than when the
portal would have shown the verdict. An entry of a contest phase that gives no feedback until
published ("none") is only "received" to its owner, whatever became of it: its message waits
for the phase's publication, since its arrival alone would tell that the entry has ended.

The organisers' messages are not built here: they carry the judge's own reasons, written with
the event (queue/outbox.py).
"""

from __future__ import annotations

from ..notify.message import Message
from ..queue.db import Queue
from ..queue.outbox import OutboxRow
from ..reasons import explanation, link
from . import participant
from .phase_view import PhaseViews

# How long a message kept back by its phase's feedback waits before the publication is looked for again.
LOOK_AGAIN = 60.0


def owner_message(queue: Queue, row: OutboxRow, at: float, portal_url: str | None) -> Message | float:
    """The message of an owner's outbox row as seen at `at`, or, while participants may not yet
    see the entry's end, when to look again: its publish time while it is being examined, a
    while later while its phase gives no feedback (or it was queued again since; the sender
    drops such a row, `stale`)."""
    assert row.entry_id is not None
    entry = queue.entry(row.entry_id)
    if participant.withheld(entry, at):  # being examined, or a container's stage 1 not yet published
        return max(at, entry.published or at + LOOK_AGAIN)
    feedback = PhaseViews.load(queue).feedback(entry, at)
    if stale(queue, row) or feedback == participant.NONE or entry.state not in ("done", "parked"):
        return at + LOOK_AGAIN
    line = participant.entry_row(entry, at, feedback)  # the allow-listed document: nothing else is read
    score = line.get("score")
    phase = f", phase {line['phase']}" if line.get("phase") else ""
    lines = [f"Entry {line['id']} ({line['archive_name']}) for {line['challenge']}{phase}:", "",
             str(line["verdict"])]
    if score is not None:
        lines.append(f"Score: {score:.4f}" if isinstance(score, float) else f"Score: {score}")
    seen = participant.Seen.at(entry, (), (), at, feedback).entry  # the reason as the verdict gives it
    said = explanation(seen.reason) if line.get("outcome") == "failed" else None
    if said is not None:  # what it means, and its row on the portal
        lines += ["", said, *([f"Every reason: {link(str(seen.reason), portal_url)}"] if portal_url else [])]
    if portal_url:
        lines += ["", f"Report: {portal_url}/entries/{line['id']}"]
    lines += ["", "You get this message because your address was given to the judge; ask the organisers to stop it."]
    subject = f"Entry {line['id']} for {line['challenge']}: {line['verdict']}"
    data = {"entry": {k: line.get(k) for k in ("id", "challenge", "phase", "state", "outcome", "verdict", "score")
                      if k in line}}
    return Message(kind=row.kind, subject=subject[:200], text="\n".join(lines) + "\n", delivery=row.delivery,
                   data=participant.allowed(data, {"entry": participant.ENTRY_ROW}))


def stale(queue: Queue, row: OutboxRow) -> bool:
    """The entry was queued again (a re-run) after the row was written: it tells of a result no
    longer the entry's."""
    assert row.entry_id is not None
    return queue.entry(row.entry_id).evaluation != row.evaluation
