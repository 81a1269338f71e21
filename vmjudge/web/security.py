"""What every response carries and what every request may send, as two small ASGI middlewares.

Headers: a Content-Security-Policy that allows only the portal's own script, style and
images (no inline script, so an entry's output that slipped past escaping could not run), no
framing, no referrer, no content sniffing, and no caching of pages that hold reports.

Body size: a request's body is refused with 413 from its Content-Length before a byte of it is
read, and counted as it streams (a chunked body has no length): an upload may be as large as
the largest archive any challenge accepts, every other form is small. The count raises
BodyTooLarge in the handler reading it, which app.py turns into the same 413 page.

Body time: a client that sends its body slowly holds a connection and, mid-upload, a
temporary file, so BodyPace bounds it three ways: each wait for the next piece of a body
([web] body_timeout: ClientStalled), the whole of a body other than an upload ([web]
form_timeout: one byte every few seconds no longer keeps a sign-in open for days), and an
upload's average rate once body_timeout has passed ([web] upload_min_rate: an upload is held
at most its size over that rate). Past a bound the handler reading the body gets the
exception, so it cleans up what it wrote, and the client gets 408 and a closed connection.
Time is counted only while the handler waits for the client's bytes: a judge busy elsewhere
(a slow disk, its threads taken) costs no client its request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import anyio
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import WebSite

log = logging.getLogger("vmjudge.web")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = ((b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"),
           (b"cache-control", b"no-store"))
SMALL_BODY = 16 * 1024  # sign-in and sign-out forms: a token and a CSRF token


class BodyTooLarge(Exception):
    """The request's body grew past its cap while it was read."""

    def __init__(self, cap: int):
        super().__init__(f"the request is over the {cap:,} bytes allowed here")
        self.cap = cap


class SecurityHeaders:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in HEADERS if h[0] not in names)]
            await send(message)

        await self.app(scope, receive, send_with_headers)


@dataclass(frozen=True)
class Refusal:
    """How a refused request is answered: the page (or JSON) for a status and a sentence."""

    respond: Callable[[Scope, int, str], Response]


class BodyLimit:
    """Caps each request's body: `cap(method, path)` bytes (uploads: the largest archive any
    challenge accepts, and the form around it)."""

    def __init__(self, app: ASGIApp, cap: Callable[[str, str], int], refusal: Refusal):
        self.app, self.cap, self.refusal = app, cap, refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        cap = self.cap(scope["method"], scope["path"])
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None:
            if not length.isdigit():
                await self.refusal.respond(scope, 400, "The request's Content-Length is not a number: send "
                                                       "it again.")(scope, receive, send)
                return
            if int(length) > cap:  # refused before a byte of the body is read
                await self.refusal.respond(scope, 413, f"The request is {int(length):,} bytes, over the {cap:,} "
                                                       "bytes allowed here: send less.")(scope, receive, send)
                return
        read = 0

        async def counted() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > cap:
                    raise BodyTooLarge(cap)
            return message

        await self.app(scope, counted, send)


class ClientStalled(Exception):
    """The request's body stopped arriving: nothing came for `seconds`."""

    def __init__(self, seconds: float):
        super().__init__(f"no part of the request's body arrived for {seconds:g} s")
        self.seconds = seconds


@dataclass
class _Pace:
    """One request's body so far: bytes that arrived, and seconds the handler waited for them."""

    web: WebSite
    upload: bool
    got: int = 0
    waited: float = 0.0
    done: bool = False  # the body is whole: what the app still receives is the client's going away

    def allowance(self) -> tuple[float, str]:
        """How long the next wait may last, and which bound ends it."""
        idle = self.web.body_timeout
        if self.upload:  # the average may fall to upload_min_rate, once the grace is over
            left = max(self.web.body_timeout, self.got / self.web.upload_min_rate) - self.waited
            return (idle, "idle") if idle <= left else (left, "rate")
        left = self.web.form_timeout - self.waited
        return (idle, "idle") if idle <= left else (left, "form")

    def behind(self) -> bool:
        """An upload below its rate, past the grace (checked as each piece arrives)."""
        return (self.upload and self.waited >= self.web.body_timeout
                and self.got < self.web.upload_min_rate * self.waited)

    def too_slow(self, bound: str, scope: Scope) -> Exception:
        """The handler's exception for `bound`, the organiser's log line with it."""
        if bound == "idle":
            return ClientStalled(self.web.body_timeout)
        where = scope["client"][0] if scope.get("client") else "a client"
        if bound == "form":
            why = f"not whole within [web] form_timeout = {self.web.form_timeout:g} s"
            sentence = (f"The request did not arrive whole within {self.web.form_timeout:g} seconds: send it again "
                        "from a steadier connection.")
        else:
            why = (f"{self.got:,} bytes in {self.waited:.0f} s, below [web] upload_min_rate = "
                   f"{self.web.upload_min_rate:,} bytes/s")
            sentence = (f"The upload arrived at {self.got / max(self.waited, 1e-9):,.0f} bytes a second, below the "
                        f"{self.web.upload_min_rate:,} the portal needs: send it again from a faster connection.")
        log.info("%s sent its body to %s %s too slowly (%s): cut off", where, scope["method"], scope["path"], why)
        return HTTPException(408, sentence, {"connection": "close"})


class BodyPace:
    """Bounds how long a request's body may take: each wait for its next piece, the whole of
    a small form, an upload's average rate (`uploads`: the paths that take archives)."""

    def __init__(self, app: ASGIApp, web: WebSite, uploads: Collection[str]):
        self.app, self.web, self.uploads = app, web, uploads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pace = _Pace(self.web, upload=scope["path"] in self.uploads)

        async def paced() -> Message:
            if pace.done:
                return await receive()
            seconds, bound = pace.allowance()
            if seconds <= 0:
                raise pace.too_slow(bound, scope)
            start = time.monotonic()
            try:
                with anyio.fail_after(seconds):
                    message = await receive()
            except TimeoutError:
                raise pace.too_slow(bound, scope) from None
            finally:
                pace.waited += time.monotonic() - start
            if message["type"] == "http.request":
                pace.got += len(message.get("body", b""))
                pace.done = not message.get("more_body", False)
                if not pace.done and pace.behind():
                    raise pace.too_slow("rate", scope)
            return message

        await self.app(scope, paced, send)
