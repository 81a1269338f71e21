"""The portal's app, built by create_app(site): routes, sessions, safety and error pages.

Every refusal is one sentence: an HTML page, or {"error": sentence} under /api/, with its
status (400, 401, 403, 404, 405, 409, 413, 429, 503); anything unforeseen is logged and
answered with a plain 500 page, never a traceback (debug is off).
"""

from __future__ import annotations

import html
import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import Site
from ..queue.db import Queue
from ..queue.owners import Owners
from .api import Api
from .organiser import Organiser
from .pages import Pages
from .portal import HERE, Portal, templates
from .secret import session_key
from .security import SMALL_BODY, BodyLimit, BodyTooLarge, Refusal, SecurityHeaders

log = logging.getLogger(__name__)
SESSION_SECONDS = 14 * 24 * 3600
UPLOADS = ("/upload", "/api/entries")
TITLES = {400: "Bad request", 401: "Sign in", 403: "Refused", 404: "Not found", 405: "Method not allowed",
          409: "Not accepted", 413: "Too large", 429: "Too many entries", 500: "Server error",
          503: "Unavailable"}


def refusal(path: str, status: int, sentence: str, headers: dict[str, str] | None = None) -> Response:
    """The answer to a refused request: JSON under /api/, else a small page of its own (no
    session, no template: it must work whatever failed)."""
    if path.startswith("/api/"):
        return JSONResponse({"error": sentence}, status_code=status, headers=headers)
    title = TITLES.get(status, "Refused")
    signin = "<p><a href='/signin'>Sign in</a></p>" if status == 401 else "<p><a href='/'>Back to the portal</a></p>"
    page = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>"
            f"{status} {html.escape(title)}</title><link rel='stylesheet' href='/static/portal.css'></head><body>"
            f"<main><h1>{status} {html.escape(title)}</h1><p class='error'>{html.escape(sentence)}</p>{signin}"
            "</main></body></html>\n")
    return HTMLResponse(page, status_code=status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return refusal(request.url.path, exc.status_code, str(exc.detail), dict(exc.headers or {}))


async def _too_large(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BodyTooLarge)
    return refusal(request.url.path, 413, f"The request is over the {exc.cap:,} bytes allowed here: send less.")


class LastResort:
    """Anything unforeseen: logged with its traceback for the organiser, a plain 500 for the
    caller (inside SecurityHeaders, so even this page carries the headers)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("the portal failed on %s %s", scope["method"], scope["path"])
            if not started:
                await refusal(scope["path"], 500, "Something failed on the judge's side; it has been logged for "
                                                  "the organisers. Try again later.")(scope, receive, send)


def create_app(site: Site, secure_cookies: bool = True, queue: Queue | None = None) -> Starlette:
    """The portal for `site`'s queue; session cookies marked Secure unless `secure_cookies` is
    off (plain http on loopback: tests, or a proxy on the same host that terminates TLS)."""
    site.layout.ensure()
    queue = queue or Queue(site.queue.url or site.layout.queue_db, host=site.queue.host, lease=site.queue.lease,
                           fair_window=site.queue.fair_window)
    portal = Portal(site, queue, Owners(queue.database), templates(), secure_cookies)

    def cap(method: str, path: str) -> int:
        return portal.upload_cap() if path in UPLOADS else SMALL_BODY

    routes = [*Pages(portal).routes(), *Organiser(portal).routes(), *Api(portal).routes(),
              Mount("/static", StaticFiles(directory=HERE / "static"), name="static")]
    middleware = [Middleware(SecurityHeaders), Middleware(LastResort),
                  Middleware(BodyLimit, cap=cap, refusal=Refusal(lambda scope, status, sentence:
                                                                 refusal(scope["path"], status, sentence))),
                  Middleware(SessionMiddleware, secret_key=session_key(site.layout.home),
                             session_cookie="vmjudge_session", max_age=SESSION_SECONDS, same_site="strict",
                             https_only=secure_cookies)]
    return Starlette(debug=False, routes=routes, middleware=middleware,
                     exception_handlers={HTTPException: _http_error, BodyTooLarge: _too_large})
