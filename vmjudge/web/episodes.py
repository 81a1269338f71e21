"""Trouble that recurs, said once: when it starts, and when it has stopped.

A server in trouble hears of it again at every turn: asyncio retries a failed accept() every
second and logs each failure with its traceback, a refused client comes straight back. Logged
each time, that filled hundreds of megabytes in minutes (issue 54) and the disk with it, which
is trouble of its own. Episodes says a trouble once when it starts, counts it while it goes on,
and says once how often it happened when it has been quiet for `quiet` seconds; then the next
occurrence starts a new episode, said again. The log grows by two lines per episode, however
hostile the clients.

AcceptFailures is the event loop's exception handler for the one trouble asyncio itself logs:
accept() out of file descriptors (or memory). Everything else goes to asyncio's own handler.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("vmjudge.web")

QUIET = 5.0  # seconds without the trouble that end an episode
OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}  # what asyncio retries accept() on


@dataclass
class _Episode:
    first: float
    last: float
    count: int = 1


class Episodes:
    """Each kind of trouble (a key: "accept", "total", a client's address) said once per episode."""

    def __init__(self, quiet: float = QUIET):
        self.quiet = quiet
        self._open: dict[str, _Episode] = {}  # only troubles going on: an ended one is forgotten

    def happened(self, key: str, start: str, end: str) -> None:
        """Log `start` if `key`'s trouble begins now, and `end` (formatted with {count} and
        {seconds}) once it has not happened for `quiet` seconds. Called on the event loop."""
        now = time.monotonic()
        episode = self._open.get(key)
        if episode is not None:
            episode.last, episode.count = now, episode.count + 1
            return
        self._open[key] = _Episode(now, now)
        log.warning("%s", start)
        asyncio.get_running_loop().call_later(self.quiet, self._check, key, end)

    def _check(self, key: str, end: str) -> None:
        episode = self._open[key]
        quiet_for = time.monotonic() - episode.last
        if quiet_for < self.quiet:
            asyncio.get_running_loop().call_later(self.quiet - quiet_for, self._check, key, end)
            return
        del self._open[key]
        log.info("%s", end.format(count=episode.count, seconds=episode.last - episode.first))


class AcceptFailures:
    """The portal's event loop exception handler: accept() failing for want of descriptors is
    one episode, said once (asyncio retries it every second, logging each time); anything
    else goes to asyncio's default handler, as before."""

    def __init__(self, episodes: Episodes, nofile: int):
        self.episodes, self.nofile = episodes, nofile

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in OUT_OF_RESOURCES and "socket" in context:
            self.episodes.happened(
                "accept",
                f"the portal cannot accept connections: {exc.strerror or exc} (its open-file limit, RLIMIT_NOFILE, "
                f"is {self.nofile}); new ones wait until some close. Said once until it has stopped for "
                f"{self.episodes.quiet:g} s",
                "the portal accepts connections again: accept() failed {count} times over {seconds:.0f} s")
            return
        loop.default_exception_handler(context)
