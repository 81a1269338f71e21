"""The owner's settings page (`/settings`): the address the owner hears of its entries at
(issue 35), set or cleared by the owner, as `vmjudge owner set NAME --email` does. Opt-in: an
owner the organisers added without an address gets no email until it gives one here.

The page shows only the signed-in owner's own address; a bad one is refused in the sentence
queue/owners.py gives, and the form is CSRF-checked like every other.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..queue.owners import OwnerError
from .portal import Portal


class Settings:
    def __init__(self, portal: Portal):
        self.portal = portal

    def routes(self) -> list[Route]:
        return [Route("/settings", self.form), Route("/settings", self.save, methods=["POST"])]

    def form(self, request: Request) -> Response:
        owner = self.portal.participant(request)
        return self.portal.page(request, "settings.html", email=owner.email or "",
                                saved=request.query_params.get("saved") == "1")

    async def save(self, request: Request) -> Response:
        owner = self.portal.participant(request)
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))
        given = form.get("email")
        email = given.strip() if isinstance(given, str) else ""
        try:
            self.portal.owners.set_email(owner.name, email or None)
        except OwnerError as exc:
            return self.portal.page(request, "settings.html", status=400, email=email, error=str(exc))
        return RedirectResponse("/settings?saved=1", status_code=303)
