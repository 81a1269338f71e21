"""`vmjudge entries` and `vmjudge logs`: the organiser's view of every entry, and of one entry's
organiser logs, without `show` on each id.

The list is filtered and paged by the queue (queue/listing.py); the logs are the files the
stages wrote (a stage log holds up to [limits] stage_output bytes), streamed, not read whole.
Everything an entry or a submitter chose is printed through echo, escaped.
"""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import Any

import click

from ..config import load_challenge
from ..errors import VmjudgeError
from ..pipeline import VM_STAGES
from ..queue.listing import OUTCOMES, STATES, EntryFilter, find_entries
from ..queue.rows import EntryRow
from .echo import echo
from .home import site_and_queue

LOG_STAGES = VM_STAGES  # stage 4 writes no log: it runs no entry code
CHUNK = 1 << 20
SINCE_RE = re.compile(r"\d{4}-\d{2}-\d{2}(T\d{2}(:\d{2}(:\d{2})?)?Z?)?")


def _since(value: str | None) -> str | None:
    """A date or a time in the queue's own format (UTC), which sorts as text: a prefix of a
    queue time compares as that moment."""
    if value is not None and not SINCE_RE.fullmatch(value):
        raise VmjudgeError(f"--since {value!r} is not a time vmjudge reads: give a UTC date or time such as "
                           "2026-11-24 or 2026-11-24T10:00:00Z.")
    return value.rstrip("Z") if value is not None else None


def verdict(e: EntryRow) -> str:
    if e.state != "done":
        return f"{e.state} {e.stage or ''}".strip() + (f" ({e.reason})" if e.state == "parked" and e.reason else "")
    if e.outcome == "failed":
        return f"failed at {e.failed_stage}: {e.reason}"
    return str(e.outcome)


def score(e: EntryRow) -> str:
    value = (e.scores or {}).get("score")
    return "-" if value is None else f"{value:.4f}"


def exam(e: EntryRow) -> str:
    if not e.exam:
        return "-"
    text = f"{e.exam.get('completed', 0)}/{e.exam.get('records', 0)}"
    extra = [f"{e.exam[k]} {k.replace('_', ' ')}" for k in ("failed", "timed_out") if e.exam.get(k)]
    return text + (" (" + ", ".join(extra) + ")" if extra else "")


def as_json(e: EntryRow) -> dict[str, Any]:
    phase = {"phase": e.phase, "carried_from": e.carried_from} if e.phase else {}
    return {"id": e.id, "challenge": e.challenge, **phase, "owner": e.owner, "late": e.late, "dry_run": e.dry_run,
            "submitted_at": e.submitted_at, "state": e.state, "stage": e.stage, "outcome": e.outcome,
            "failed_stage": e.failed_stage, "reason": e.reason, "scores": e.scores, "exam": e.exam,
            "finished_at": e.finished_at}


def where(e: EntryRow) -> str:
    """The challenge, and a contest's phase after a slash: hecktor/test."""
    return f"{e.challenge}/{e.phase}" if e.phase else e.challenge


@click.command("entries")
@click.argument("challenge", required=False)
@click.option("--state", "states", multiple=True, type=click.Choice(STATES), help="Only these states (repeatable).")
@click.option("--outcome", type=click.Choice(OUTCOMES), help="Only entries that ended so.")
@click.option("--owner", help="Only this owner's entries.")
@click.option("--late/--official", "late", default=None, help="Only late, or only official, entries.")
@click.option("--since", metavar="TIME", help="Submitted at or after TIME: 2026-11-24 or 2026-11-24T10:00:00Z.")
@click.option("--phase", default=None, help="Only the entries of this phase of a contest.")
@click.option("--limit", type=click.IntRange(1, 100000), default=50, show_default=True, help="Entries per page.")
@click.option("--page", type=click.IntRange(1), default=1, show_default=True, help="Which page, newest first.")
@click.option("--json", "as_json_", is_flag=True, help="One JSON document: total, page and the entries.")
@click.pass_context
def entries(ctx: click.Context, challenge: str | None, states: tuple[str, ...], outcome: str | None,
            owner: str | None, late: bool | None, since: str | None, phase: str | None, limit: int, page: int,
            as_json_: bool) -> None:
    """Every entry, newest first: state or verdict, score and exam counts (an entry of a contest's
    phase shows its challenge as CHALLENGE/PHASE)."""
    _, queue = site_and_queue(ctx)
    if challenge is not None:
        directory = queue.challenge_dir(challenge)  # an unknown name is one sentence, not an empty list
        if phase is not None:
            load_challenge(directory).phase_named(phase)
    found = find_entries(queue.database, EntryFilter(challenge=challenge, states=states, outcome=outcome, owner=owner,
                                                 late=late, since=_since(since), phase=phase),
                         limit=limit, offset=(page - 1) * limit)
    if as_json_:
        echo(json.dumps({"total": found.total, "page": page, "limit": limit,
                         "entries": [as_json(e) for e in found.entries]}, indent=2))
        return
    echo(f"{'ID':>6}  {'CHALLENGE':<16} {'OWNER':<16} {'SUBMITTED':<20}  {'SCORE':>6}  {'EXAM':<10} VERDICT")
    for e in found.entries:
        echo(f"{e.id:>6}  {where(e):<16} {e.owner + (' (late)' if e.late else ''):<16} {e.submitted_at:<20}  "
             f"{score(e):>6}  {exam(e):<10} {verdict(e)}")
    shown = len(found.entries)
    if found.total == 0:
        echo("no entries match")
    else:
        first = found.offset + 1 if shown else found.offset
        more = f"; --page {page + 1} for older ones" if found.offset + shown < found.total else ""
        echo(f"entries {first}-{found.offset + shown} of {found.total}, newest first{more}")
    if any(e.reason for e in found.entries):  # on stderr: the table on stdout stays one for scripts to read
        echo("`vmjudge reasons CODE` says what a reason means and what to do about it.", err=True)


@click.command("logs")
@click.argument("entry_id", type=int)
@click.option("--stage", type=click.Choice(LOG_STAGES), help="Only this stage's log.")
@click.pass_context
def logs(ctx: click.Context, entry_id: int, stage: str | None) -> None:
    """ENTRY_ID's organiser logs (what its commands printed, capped), stage by stage."""
    site, queue = site_and_queue(ctx)
    queue.entry(entry_id)  # an unknown id is one sentence
    files = site.layout.results_of(entry_id)
    printed = 0
    for name in (stage,) if stage else LOG_STAGES:
        path = files.stage_log(name)
        if not path.is_file():
            continue
        echo(f"==> {path.name} ({path.stat().st_size} bytes) <==")
        _stream(path)
        printed += 1
    if not printed:
        raise VmjudgeError(f"entry {entry_id} has no {stage + ' ' if stage else ''}log yet: a stage's log is "
                           "written when the stage runs (`vmjudge entries` shows where it stands).")


def _stream(path: Path) -> None:
    """The file in chunks, decoded as it goes (a character split between chunks stays whole)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    last = "\n"
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            text = decoder.decode(chunk)
            echo(text, nl=False)
            last = text[-1:] or last
    text = decoder.decode(b"", final=True)
    echo(text, nl=not (text or last).endswith("\n"))
