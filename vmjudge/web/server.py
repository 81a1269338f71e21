"""Serving the portal: uvicorn, with the guards it lacks against slow and many clients, and a log
the organiser can read.

uvicorn's h11 server waits for a request's line and headers as long as the client keeps its
connection open: one header byte every few seconds holds a connection for ever, and enough of
them hold every connection the host has. GuardedH11 gives each request `header_timeout`
seconds, from the connection's start or from the end of its previous response, to send its
line and headers whole, and closes the connection otherwise (uvicorn's own keep-alive timer
only covers a connection that sends nothing at all). A body that arrives too slowly is
security.BodyPace's: the app is waiting for it then, so the app can answer and clean up.

However short each request, many connections at once still take every file descriptor the
process may open, and then accept() fails for every client (issue 54): GuardedH11 admits each
connection through admission.Crowd as it is made, before reading a byte of it, per client
address and in all, the total chosen from the process's open-file limit. uvicorn's own
limit_concurrency would not do: it answers 503 only once a request's headers are in, so a
client that sends none holds its descriptor meanwhile. What still fails for want of
descriptors (a burst accepted in one turn of the event loop) is said once per episode in the
log (episodes.AcceptFailures), not once a second with a traceback.

No server option or maintained package gives a total time for headers: hypercorn and uvicorn
time each read, or the idle time between requests, not the whole of a request's headers. The
subclass overrides four of H11Protocol's methods and calls each of them first.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import socket
import sys
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import LOGGING_CONFIG, STARTUP_FAILURE
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..config import WebSite
from .admission import Crowd, client_key, nofile, open_files, per_client, starting_total, total_for
from .episodes import AcceptFailures

log = logging.getLogger("vmjudge.web")


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol, with a deadline on each request's headers and a cap on
    connections."""

    header_timeout = 10.0  # set per server by guarded()
    crowd: Crowd  # set per server by guarded()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._seen: object = None  # the request cycle whose headers last arrived
        self._admitted: str | None = None  # whom the connection counts against, once admitted
        super().connection_made(transport)
        key = client_key(self.client)
        refused = self.crowd.admit(key)
        if refused is not None:  # answered at once, nothing read: its descriptor is free again
            transport.write(refused)
            transport.close()
            return
        self._admitted = key
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
        if self._admitted is not None:
            self.crowd.release(self._admitted)
            self._admitted = None
        super().connection_lost(exc)

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            where = "{}:{}".format(*self.client) if self.client else "a client"
            log.info("closed the connection of %s: it sent no whole request headers within %g s", where,
                     self.header_timeout)
            self.transport.close()


def guarded(header_timeout: float, crowd: Crowd) -> type[GuardedH11]:
    return type("GuardedH11", (GuardedH11,), {"header_timeout": header_timeout, "crowd": crowd})


class NoWebsocketAdvice(logging.Filter):
    """Drops uvicorn's two warnings on a websocket upgrade request: the portal has no websocket
    on purpose (serve: ws="none"), and advice to install a library, twice per such request of
    any client, is not the organiser's to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Unsupported upgrade request", "No supported WebSocket library"))


class NoQueryStrings(logging.Filter):
    """Keeps query strings out of uvicorn's access log: a link's token (the address confirmation's,
    `/settings/confirm?token=…`) would let whoever reads the log use it."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (args[0], args[1], args[2].split("?", 1)[0] + "?…", *args[3:])
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's own log setup, with the portal's logger beside its error log (stderr): what
    failed on the judge's side, clients cut off for being slow or going away."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["vmjudge"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    config.setdefault("filters", {})["no_websocket_advice"] = {"()": NoWebsocketAdvice}
    config["loggers"]["uvicorn.error"]["filters"] = ["no_websocket_advice"]
    config["filters"]["no_query_strings"] = {"()": NoQueryStrings}
    config["loggers"]["uvicorn.access"]["filters"] = ["no_query_strings"]
    return config


class PortalServer(uvicorn.Server):
    """uvicorn's server, with the loop's exception handler that says accept() failures once,
    and the total of connections set from the descriptors the started server actually holds."""

    def __init__(self, config: uvicorn.Config, crowd: Crowd):
        super().__init__(config)
        self.crowd = crowd

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(AcceptFailures(self.crowd.episodes, self.crowd.nofile))
        await super().startup(sockets)
        held = open_files()
        self.crowd.total = max(1, total_for(self.crowd.nofile, held))
        log.info("serving at most %d connections at once, %s (RLIMIT_NOFILE %d, %d descriptors held by the portal "
                 "itself)", self.crowd.total, f"{self.crowd.per_client} from one address" if self.crowd.per_client
                 else "with no cap per address ([web] connections_per_client)", self.crowd.nofile, held)


def serve(app: ASGIApp, host: str, port: int, web: WebSite) -> None:
    """Serve `app` until SIGINT or SIGTERM, in this process."""
    limit = nofile()
    crowd = Crowd(per_client(web.connections_per_client, host), starting_total(limit), limit)
    # ws="none": the portal has no websocket, and a connection upgraded to one would leave GuardedH11
    # (its deadline, and its count in the crowd, never given back).
    config = uvicorn.Config(app, host=host, port=port, http=guarded(web.header_timeout, crowd), ws="none",
                            log_config=log_config(), log_level="info", server_header=False, proxy_headers=False)
    server = PortalServer(config, crowd)
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: a second Ctrl-C during shutdown
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
