"""An owner's entries as the portal lists them: paged in SQL (queue/listing.py); what of each
a participant sees is reports/participant.py's entry_row."""

from __future__ import annotations

import re

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..queue.listing import OUTCOMES, STATES, EntryFilter, Page, find_entries
from .portal import PAGE_SIZE, Portal

# ASCII digits only, and few enough that int() is cheap and the database takes the number:
# str.isdigit() passes "²", which int() refuses, and a route's int convertor turns a 10 000-digit
# path into a ValueError (Python's limit) or an id SQLite cannot bind (OverflowError).
_PAGE = re.compile(r"[0-9]{1,7}")
_ENTRY_ID = re.compile(r"[0-9]{1,18}")


def page_number(request: Request) -> int:
    value = request.query_params.get("page", "1")
    if not _PAGE.fullmatch(value) or not 1 <= int(value) <= 10**6:
        raise HTTPException(400, f"The page {value[:20]!r} is not a page number: give a whole number from 1 to "
                                 "1000000.")
    return int(value)


def entry_number(request: Request, missing: str = "You have no entry {}.") -> int:
    """The path's entry id (routes take it as text): a number no entry can have is 404, as a
    missing entry is."""
    value = request.path_params["entry_id"]
    if not _ENTRY_ID.fullmatch(value):
        raise HTTPException(404, missing.format(repr(value[:20])))
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
