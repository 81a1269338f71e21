"""The portal's app, built by create_app(site): routes, sessions, safety and error pages.

Every refusal is one sentence: an HTML page, or {"error": sentence} under /api/, with its
status (400, 401, 403, 404, 405, 409, 413, 429, 503); anything unforeseen is logged and
answered with a plain 500 page, never a traceback (debug is off).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from ..config import Site
from ..errors import VmjudgeError
from ..queue.db import Queue
from ..queue.failed_uploads import FailedUploads
from ..queue.object_store import stored
from ..queue.owners import Owners
from .api import Api
from .challenge_pages import ChallengePages
from .checks import Checker
from .failures import HANDLERS, LastResort
from .gate import Gate
from .organiser import Organiser
from .pages import Pages
from .phase_pages import PhasePages
from .portal import HERE, Portal, templates
from .refusal import refusal
from .secret import session_key
from .security import SMALL_BODY, BodyLimit, BodyPace, Refusal, SecurityHeaders
from .settings import Settings
from .signup import SignUp
from .teams import TeamPages

SESSION_SECONDS = 14 * 24 * 3600
UPLOADS = ("/upload", "/api/entries")
UNKNOWN_CAP = 1 << 40
UPLOAD_THREADS = 8  # uploads' bodies written to disk at once (a chunk at a time, each briefly)


def create_app(site: Site, secure_cookies: bool = True, queue: Queue | None = None) -> Starlette:
    """The portal for `site`'s queue; session cookies marked Secure unless `secure_cookies` is
    off (plain http on loopback: tests, or a proxy on the same host that terminates TLS)."""
    site.layout.ensure()
    queue = queue or Queue(site.queue.url or site.layout.queue_db, host=site.queue.host, lease=site.queue.lease,
                           fair_window=site.queue.fair_window, stored=stored(site.storage))
    gate = Gate(FailedUploads(queue.database), site.web.failed_uploads_per_hour)
    portal = Portal(site=site, queue=queue, owners=Owners(queue.database), pages=templates(), gate=gate,
                    upload_io=anyio.CapacityLimiter(UPLOAD_THREADS), checker=Checker(site.web.checks),
                    secure_cookies=secure_cookies)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(portal.checker.start)
        try:
            yield
        finally:
            portal.checker.close()

    def cap(method: str, path: str) -> int:
        if path not in UPLOADS:
            return SMALL_BODY
        try:
            return portal.upload_cap()
        except VmjudgeError:  # the queue is down: the handler answers 503 before it reads a byte, and
            return UNKNOWN_CAP  # an archive is still capped by its challenge's max_size as it streams

    api = Api(portal)
    routes = [*ChallengePages(portal).routes(), *Pages(portal).routes(), *Organiser(portal).routes(), *api.routes(),
              *PhasePages(portal, api.caller).routes(), *Settings(portal).routes(), *SignUp(portal).routes(),
              *TeamPages(portal).routes(),
              Mount("/static", StaticFiles(directory=HERE / "static"), name="static")]
    middleware = [Middleware(SecurityHeaders), Middleware(LastResort),
                  Middleware(BodyPace, web=site.web, uploads=UPLOADS),
                  Middleware(BodyLimit, cap=cap, refusal=Refusal(lambda scope, status, sentence:
                                                                 refusal(scope["path"], status, sentence))),
                  Middleware(SessionMiddleware, secret_key=session_key(site.layout.home),
                             session_cookie="vmjudge_session", max_age=SESSION_SECONDS, same_site="strict",
                             https_only=secure_cookies)]
    return Starlette(debug=False, routes=routes, middleware=middleware, exception_handlers=HANDLERS,
                     lifespan=lifespan)
