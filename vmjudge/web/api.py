"""The JSON API: POST /api/entries (multipart: challenge, archive, late), GET /api/entries (the
caller's own, paged) and GET /api/entries/ID (the participant JSON of reports.report.show());
every answer is a reports/participant.py document, seen now.

Only `Authorization: Bearer TOKEN` signs a call in; a session cookie alone is refused, so a
page of another site cannot make a signed-in browser call the API (no CSRF token needed: no
browser sends a bearer token by itself). Errors are {"error": sentence} with their status.
"""

from __future__ import annotations

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..queue.listing import EntryFilter
from ..queue.owners import Owner
from ..reports import participant
from ..reports.phase_view import PhaseViews
from ..reports.report import show
from .entries import entries_page, entry_number, page_number
from .portal import PAGE_SIZE, Portal
from .upload import upload_entry


class Api:
    def __init__(self, portal: Portal):
        self.portal = portal

    def routes(self) -> list[Route]:
        return [Route("/api/entries", self.list_entries), Route("/api/entries", self.submit, methods=["POST"]),
                Route("/api/entries/{entry_id}", self.entry)]

    def caller(self, request: Request) -> Owner:
        owner = self.portal.bearer(request)
        if owner is None:
            raise HTTPException(401, "Send your token as `Authorization: Bearer TOKEN`: the API takes no cookies.",
                                headers={"WWW-Authenticate": "Bearer"})
        return owner

    def list_entries(self, request: Request) -> Response:
        owner = self.caller(request)
        page = page_number(request)
        found = entries_page(self.portal, EntryFilter(owners=self.portal.seen_as_own(owner)), page)
        return JSONResponse(participant.entry_list(found.entries, found.total, page, PAGE_SIZE, participant.now(),
                                                   PhaseViews.load(self.portal.queue).feedback))

    def entry(self, request: Request) -> Response:
        owner = self.caller(request)
        entry_id = entry_number(request)
        self.portal.own_entry(owner, entry_id)
        return JSONResponse(show(self.portal.site, self.portal.queue, entry_id))

    async def submit(self, request: Request) -> Response:
        # on the uploads' threads: a burst of uploads never takes the page handlers' threads, even to sign in
        owner = await anyio.to_thread.run_sync(self.caller, request, limiter=self.portal.upload_io)
        admitted = await upload_entry(self.portal, request, owner)
        return JSONResponse(participant.allowed(
            {"id": admitted.entry_id, "owner": admitted.owner, "late": admitted.late, "dry_run": admitted.dry_run,
             **({"phase": admitted.phase} if admitted.phase else {}),
             "remaining": admitted.remaining_line(), "budget": admitted.budget_line()}, participant.SUBMITTED),
            status_code=201)
