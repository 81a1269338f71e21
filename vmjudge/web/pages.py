"""The participant's pages: sign in and out, upload an entry, my entries (refreshed by
static/entries.js from /entries.json), an entry's report, and the boards (a contest's: one per
phase, a hidden one until its phase is published).

Every page is built from reports/participant.py's documents, seen now (an entry being
examined shows nothing of its exam until its publish time): a report from report_page (steps
and bars by report_view.py), a board's chart from board_history (chart.py); entry output goes
through autoescaping and terminal.printable. Another owner's entry is 404, never 403.
"""

from __future__ import annotations

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from ..queue.listing import EntryFilter
from ..queue.teams import Teams
from ..reports import leaderboard as lb
from ..reports import participant
from ..reports.phase_view import PhaseViews, board_phase, hidden_board
from ..reports.report import report_page
from ..terminal import printable
from . import report_view
from .chart import chart
from .entries import entries_page, entry_number, page_number, pages_of
from .portal import Portal
from .upload import upload_entry


class Pages:
    def __init__(self, portal: Portal):
        self.portal = portal

    def routes(self) -> list[Route]:
        return [Route("/signin", self.signin_form),
                Route("/signin", self.signin, methods=["POST"]), Route("/signout", self.signout, methods=["POST"]),
                Route("/entries", self.entries), Route("/entries.json", self.entries_json),
                Route("/entries/{entry_id}", self.report), Route("/upload", self.upload_form),
                Route("/upload", self.upload, methods=["POST"]), Route("/leaderboards", self.boards),
                Route("/leaderboards/{challenge}", self.board)]

    def signin_form(self, request: Request) -> Response:
        return self.portal.page(request, "signin.html", signs_up=self.portal.site.portal.signs_up)

    async def signin(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))
        token = form.get("token")
        owner = self.portal.owners.by_token(token.strip()) if isinstance(token, str) and token.strip() else None
        if owner is None:
            return self.portal.page(request, "signin.html", status=401,
                                    error="That token does not sign anyone in (it may have been revoked): check it, "
                                          "or ask the organisers for a new one.")
        self.portal.sign_in(request, owner)
        return RedirectResponse("/entries", status_code=303)

    async def signout(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=2)
        self.portal.check_csrf(request, form.get("csrf"))
        self.portal.sign_out(request)
        return RedirectResponse("/signin", status_code=303)

    def entries(self, request: Request) -> Response:
        owner = self.portal.participant(request)
        page = page_number(request)
        found = entries_page(self.portal, EntryFilter(owners=self.portal.seen_as_own(owner)), page)
        doc = participant.entry_list(found.entries, found.total, page, None, participant.now(),
                                     PhaseViews.load(self.portal.queue).feedback)
        return self.portal.page(request, "entries.html", rows=doc["entries"], page=page, pages=pages_of(found),
                                total=found.total)

    def entries_json(self, request: Request) -> Response:
        owner = self.portal.participant(request)
        page = page_number(request)
        found = entries_page(self.portal, EntryFilter(owners=self.portal.seen_as_own(owner)), page)
        return JSONResponse(participant.entry_list(found.entries, found.total, page, None, participant.now(),
                                                   PhaseViews.load(self.portal.queue).feedback))

    def report(self, request: Request) -> Response:
        """The report as a page of steps, bars and tables; `?format=text` the same report as the
        text of `vmjudge show`, which the page was before and scripts may still read."""
        owner = self.portal.participant(request)
        entry_id = entry_number(request)
        entry = self.portal.own_entry(owner, entry_id)
        views = PhaseViews.load(self.portal.queue)
        doc = report_page(self.portal.queue, entry_id, views=views)
        if request.query_params.get("format") == "text":
            return PlainTextResponse(printable(doc["report"]))
        ch = views.challenge(entry.challenge)
        # "Choose for phase P": the phases that take entries carried from this one's phase
        carries = [p.name for p in ch.phases if entry.phase and p.carry == entry.phase] if ch is not None else []
        return self.portal.page(request, "report.html", doc=doc, steps=report_view.steps(doc),
                                budget=report_view.budget_bar(doc), hardware=report_view.hardware(doc),
                                carries=carries)

    def upload_form(self, request: Request) -> Response:
        self.portal.participant(request)
        views = PhaseViews.load(self.portal.queue)
        names = self.portal.challenge_names()
        phases = {name: [p.name for p in ch.phases if p.uploads]
                  for name in names if (ch := views.challenge(name)) is not None and ch.phases}
        return self.portal.page(request, "upload.html", challenges=names, phases=phases)

    async def upload(self, request: Request) -> Response:
        owner = await anyio.to_thread.run_sync(self.portal.participant, request, limiter=self.portal.upload_io)
        admitted = await upload_entry(self.portal, request, owner,
                                      lambda upload: self.portal.check_csrf(request, upload.text("csrf")))
        lines = [line for line in (admitted.remaining_line(), admitted.budget_line()) if line]
        return self.portal.page(request, "submitted.html", status=201, entry_id=admitted.entry_id, lines=lines)

    def boards(self, request: Request) -> Response:
        self.portal.participant(request)
        views = PhaseViews.load(self.portal.queue)
        names = self.portal.challenge_names()
        phases = {name: [p.name for p in ch.phases] for name in names if (ch := views.challenge(name)) is not None}
        return self.portal.page(request, "boards.html", challenges=names, phases=phases)

    def board(self, request: Request) -> Response:
        """A board: its rows, the signed-in owner's marked, and the chart of how it came to be."""
        me = self.portal.participant(request)
        challenge = request.path_params["challenge"]
        if challenge not in self.portal.challenge_names():
            raise HTTPException(404, f"There is no challenge named {challenge!r}.")
        late = request.query_params.get("late") == "1"
        views, at = PhaseViews.load(self.portal.queue), participant.now()
        ch = views.challenge(challenge)
        asked = request.query_params.get("phase") or None
        if asked is not None and (ch is None or asked not in [p.name for p in ch.phases]):
            raise HTTPException(404, f"{challenge} has no phase {asked[:40]!r}.")
        phase = board_phase(ch, asked, at) if ch is not None else None
        title = lb.title(challenge, late, phase)
        if not views.board_shown(challenge, phase, at):
            return self.portal.page(request, "board.html", challenge=challenge, late=late, rows=[], columns=[],
                                    title=title, phase=phase, hidden=hidden_board(challenge, str(phase)), chart=None)
        lower = ch is not None and ch.lower_first
        rows = lb.leaderboard(self.portal.queue, challenge, late, at=at, phase=phase, lower_first=lower)
        history = participant.board_history(lb.history(self.portal.queue, challenge, late, at=at, phase=phase,
                                                       lower_first=lower))
        mine = Teams(self.portal.queue.database).entrant(challenge, me.name)  # the row of their team, if in one
        drawn = chart(history, [r["owner"] for r in participant.board_rows(rows)], mine, lower)
        return self.portal.page(request, "board.html", challenge=challenge, late=late,
                                rows=participant.board_rows(rows), columns=lb.columns(rows), title=title, phase=phase,
                                hidden=None, chart=drawn, mine=mine)
