"""The organiser's pages: every entry (filtered by challenge, owner, state, outcome; paged),
an entry's attempts as a timeline with the infrastructure's reasons (show(..., organiser=True)),
the queue now (queue_now.py), the parked entries, and an entry's logs as `show --organiser`
quotes them (head and tail). Organiser accounts only: a participant gets 404, as if the pages
did not exist."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..queue.listing import OUTCOMES, STATES, EntryFilter
from ..reports.report import show
from .entries import entries_page, entry_number, organiser_filter, page_number, pages_of
from .portal import Portal
from .queue_now import queue_now


class Organiser:
    def __init__(self, portal: Portal):
        self.portal = portal

    def routes(self) -> list[Route]:
        return [Route("/organiser/entries", self.entries), Route("/organiser/parked", self.parked),
                Route("/organiser/entries/{entry_id}", self.entry),
                Route("/organiser/entries/{entry_id}/logs", self.logs), Route("/organiser/queue", self.queue_now)]

    def _entry_doc(self, request: Request) -> dict[str, Any]:
        entry_id = entry_number(request, "There is no entry {}.")
        self.portal.queue_entry_or_404(entry_id)
        return show(self.portal.site, self.portal.queue, entry_id, organiser=True)

    def entries(self, request: Request) -> Response:
        self.portal.organiser(request)
        f, page = organiser_filter(request), page_number(request)
        found = entries_page(self.portal, f, page)
        query = {"challenge": f.challenge or "", "owner": f.owner or "", "state": f.states[0] if f.states else "",
                 "outcome": f.outcome or ""}
        return self.portal.page(request, "all_entries.html", rows=found.entries, page=page, pages=pages_of(found),
                                total=found.total, query=query, states=STATES, outcomes=OUTCOMES,
                                challenges=self.portal.challenge_names(),
                                query_string=urlencode({k: v for k, v in query.items() if v}) + "&")

    def queue_now(self, request: Request) -> Response:
        self.portal.organiser(request)
        return self.portal.page(request, "queue_now.html", now=queue_now(self.portal.queue))

    def parked(self, request: Request) -> Response:
        self.portal.organiser(request)
        page = page_number(request)
        found = entries_page(self.portal, EntryFilter(states=("parked",)), page)
        return self.portal.page(request, "parked.html", rows=found.entries, page=page, pages=pages_of(found),
                                total=found.total)

    def entry(self, request: Request) -> Response:
        self.portal.organiser(request)
        doc = self._entry_doc(request)
        return self.portal.page(request, "organiser_entry.html", doc=doc, details=doc["organiser"])

    def logs(self, request: Request) -> Response:
        self.portal.organiser(request)
        doc = self._entry_doc(request)
        return self.portal.page(request, "logs.html", doc=doc, logs=doc["organiser"]["logs"])
