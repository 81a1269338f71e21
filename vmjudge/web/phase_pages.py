"""A contest's phases in the portal (issue 40): each challenge's phases page (windows, rules,
publication, the owners promoted), and "Choose for phase P", which carries one of the
participant's entries into a later phase, as a form and as the API's POST
/api/entries/ID/carry. The JSON twin of the phases page is GET /api/challenges/NAME/phases.

Every answer is built by reports/ (phase_view.py, participant.py) from its allow-list, and a
carry is refused with the same sentences as `vmjudge carry` (queue/carry.py). Another owner's
entry is "not found", as everywhere in the portal.
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config import load_challenge
from ..queue.admit import Admitted
from ..queue.carry import carry
from ..queue.owners import Owner
from ..reports import participant
from ..reports.phase_view import PhaseViews, phases_document
from .entries import entry_number
from .portal import Portal

MAX_FIELDS = 4  # csrf and phase


class PhasePages:
    def __init__(self, portal: Portal, caller: Any):
        """`caller` signs an API call in by its bearer token (api.Api.caller)."""
        self.portal, self.caller = portal, caller

    def routes(self) -> list[Route]:
        return [Route("/phases/{challenge}", self.phases),
                Route("/entries/{entry_id}/carry", self.carry_form, methods=["POST"]),
                Route("/api/challenges/{challenge}/phases", self.phases_json),
                Route("/api/entries/{entry_id}/carry", self.carry_api, methods=["POST"])]

    def _document(self, request: Request) -> dict[str, Any]:
        challenge = request.path_params["challenge"]
        if challenge not in self.portal.challenge_names():
            raise HTTPException(404, f"There is no challenge named {challenge!r}.")
        return phases_document(PhaseViews.load(self.portal.queue), challenge, participant.now())

    def phases(self, request: Request) -> Response:
        self.portal.participant(request)
        doc = self._document(request)
        return self.portal.page(request, "phases.html", doc=doc)

    def phases_json(self, request: Request) -> Response:
        self.caller(request)
        return JSONResponse(self._document(request))

    async def _carry(self, request: Request, owner: Owner, phase: object) -> Admitted:
        entry_id = entry_number(request)
        if not isinstance(phase, str) or not phase:
            raise HTTPException(400, "Name the phase to carry the entry into (the form's phase field).")

        def work() -> Admitted:  # the queue and the challenge's files, on the uploads' threads
            entry = self.portal.own_entry(owner, entry_id)
            ch = load_challenge(self.portal.challenge_dir(entry.challenge))
            return carry(self.portal.queue, entry.challenge, ch, phase, entry_id, rate_limited=True,
                         owner=entry.owner)  # own_entry's: the participant's, or their team's

        return await anyio.to_thread.run_sync(work, limiter=self.portal.upload_io)

    async def carry_form(self, request: Request) -> Response:
        owner = self.portal.participant(request)
        form = await request.form(max_files=0, max_fields=MAX_FIELDS)
        self.portal.check_csrf(request, form.get("csrf"))
        admitted = await self._carry(request, owner, form.get("phase"))
        lines = [line for line in (admitted.remaining_line(), admitted.budget_line()) if line]
        return self.portal.page(request, "submitted.html", status=201, entry_id=admitted.entry_id, lines=lines)

    async def carry_api(self, request: Request) -> Response:
        owner = self.caller(request)
        form = await request.form(max_files=0, max_fields=MAX_FIELDS)
        admitted = await self._carry(request, owner, form.get("phase"))
        return JSONResponse(participant.allowed(
            {"id": admitted.entry_id, "owner": admitted.owner, "late": admitted.late, "dry_run": admitted.dry_run,
             "phase": admitted.phase, "carried_from": entry_number(request),
             "remaining": admitted.remaining_line(), "budget": admitted.budget_line()}, participant.SUBMITTED),
            status_code=201)
