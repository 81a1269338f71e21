"""What every response carries and what every request may send, as two small ASGI middlewares.

Headers: a Content-Security-Policy that allows only the portal's own script, style and
images (no inline script, so an entry's output that slipped past escaping could not run), no
framing, no referrer, no content sniffing, and no caching of pages that hold reports.

Body size: a request's body is refused with 413 from its Content-Length before a byte of it is
read, and counted as it streams (a chunked body has no length): an upload may be as large as
the largest archive any challenge accepts, every other form is small. The count raises
BodyTooLarge in the handler reading it, which app.py turns into the same 413 page.

Body time: a client that stops sending its body holds a connection and, mid-upload, a
temporary file; each wait for the next piece of a body is bounded (BodyIdle), and past it the
handler reading the body gets ClientStalled, so it cleans up what it wrote, and the client
gets 408 and a closed connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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


class BodyIdle:
    """Bounds each wait for the next piece of a request's body to `seconds`."""

    def __init__(self, app: ASGIApp, seconds: float):
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def timed() -> Message:
            try:
                with anyio.fail_after(self.seconds):
                    return await receive()
            except TimeoutError:
                raise ClientStalled(self.seconds) from None

        await self.app(scope, timed, send)
