"""An owner's entries as the portal lists them: paged in SQL (queue/listing.py); what of each
a participant sees is reports/participant.py's entry_row."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..queue.listing import OUTCOMES, STATES, EntryFilter, Page, find_entries
from .portal import PAGE_SIZE, Portal


def page_number(request: Request) -> int:
    value = request.query_params.get("page", "1")
    if not value.isdigit() or not 1 <= int(value) <= 10**6:
        raise HTTPException(400, f"The page {value!r} is not a page number: give a whole number from 1.")
    return int(value)


def entries_page(portal: Portal, f: EntryFilter, page: int) -> Page:
    return find_entries(portal.queue.database, f, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)


def organiser_filter(request: Request) -> EntryFilter:
    """The organiser's filters from the query string: challenge, owner, state, outcome."""
    q = request.query_params
    states = tuple(s for s in q.getlist("state") if s)
    outcome = q.get("outcome") or None
    if any(s not in STATES for s in states) or (outcome is not None and outcome not in OUTCOMES):
        raise HTTPException(400, f"Filter by a state among {', '.join(STATES)} and an outcome among "
                                 f"{', '.join(OUTCOMES)}.")
    return EntryFilter(challenge=q.get("challenge") or None, owner=q.get("owner") or None, states=states,
                       outcome=outcome)


def pages_of(found: Page) -> int:
    return max(1, -(-found.total // PAGE_SIZE))
