"""Serving the portal: uvicorn, with the one guard it lacks against slow clients, and a log the
organiser can read.

uvicorn's h11 server waits for a request's line and headers as long as the client keeps its
connection open: one header byte every few seconds holds a connection for ever, and enough of
them hold every connection the host has. GuardedH11 gives each request `header_timeout`
seconds, from the connection's start or from the end of its previous response, to send its
line and headers whole, and closes the connection otherwise (uvicorn's own keep-alive timer
only covers a connection that sends nothing at all). A body that stops arriving is
security.BodyIdle's: the app is waiting for it then, so the app can answer and clean up.

No server option or maintained package gives a total time for headers: hypercorn and uvicorn
time each read, or the idle time between requests, not the whole of a request's headers. The
subclass overrides three of H11Protocol's methods and calls each of them first.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..config import WebSite

log = logging.getLogger("vmjudge.web")


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol, with a deadline on each request's headers."""

    header_timeout = 10.0  # set per server by guarded()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._seen: object = None  # the request cycle whose headers last arrived
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self.cycle is not self._seen:  # a request's headers are in
            self._seen = self.cycle
            self._disarm()

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._arm()  # the next request's headers; a pipelined one already here disarms it
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            where = "{}:{}".format(*self.client) if self.client else "a client"
            log.info("closed the connection of %s: it sent no whole request headers within %g s", where,
                     self.header_timeout)
            self.transport.close()


def guarded(header_timeout: float) -> type[GuardedH11]:
    return type("GuardedH11", (GuardedH11,), {"header_timeout": header_timeout})


def log_config() -> dict[str, Any]:
    """uvicorn's own log setup, with the portal's logger beside its error log (stderr): what
    failed on the judge's side, clients cut off for being slow or going away."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["vmjudge"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


def serve(app: ASGIApp, host: str, port: int, web: WebSite) -> None:
    """Serve `app` until SIGINT or SIGTERM, in this process."""
    uvicorn.run(app, host=host, port=port, http=guarded(web.header_timeout), log_config=log_config(),
                log_level="info", server_header=False, proxy_headers=False)
