"""How many connections the portal holds at once: from one client, and in all.

A connection costs the portal a file descriptor from the moment it is accepted, whatever the
client then sends. Slow clients (one byte every few seconds) held one each for as long as they
liked; once the process's open-file limit (RLIMIT_NOFILE) was reached, accept() failed for
everyone, and a participant's plain page waited for ever (issue 54). The time a request may take
is bounded elsewhere (server.GuardedH11's header deadline, security.BodyPace); here, the number.

Crowd admits a connection when it is made, before a byte of it is read: `per_client` open at
once from one address (an IPv6 client by its /64, which one subscriber commonly holds whole),
and `total` in all, chosen from RLIMIT_NOFILE so that whatever the portal opens while it serves
admitted connections (a database connection on a worker thread, a static file, an upload's
temporary file) always finds a descriptor. Beyond either cap the connection is answered at once
(429 for its address, 503 for all) and closed, and the refusal is said once per episode in the
log (episodes.py). One address may never hold more than half of the total, so that one client
alone never shuts out the rest.
"""

from __future__ import annotations

import ipaddress
import os
import resource
from collections import Counter

from ..errors import VmjudgeError
from .episodes import Episodes

# What one admitted connection may hold at once: its socket and, while its request is served,
# a worker thread's database connection (SQLite: the file, its -wal and -shm) and one file
# (a static file, an upload's temporary file).
PER_CONNECTION = 5
# Descriptors never given to connections: those accepted in one turn of the event loop before
# they are refused, the check workers' pipes opened later, whatever a library opens now and then.
SPARE = 16
# What the server's start adds to what the process holds before it: the event loop's selector and
# wake-up pipe, the listening socket, the check workers' forkserver and pipes.
STARTING = 16
LEAST = 2  # connections, or the portal does not start
PER_CLIENT = 32  # [web] connections_per_client left out, on a listener other than loopback
UNLIMITED = 1 << 20  # RLIMIT_NOFILE's "infinity", as no kernel gives it


def nofile() -> int:
    """The process's open-file limit (the soft one: what open() and accept() are held to)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED if soft == resource.RLIM_INFINITY else soft


def open_files() -> int:
    """Descriptors the process holds now (Linux's /proc; the listing's own is not counted)."""
    return len(os.listdir("/proc/self/fd")) - 1


def total_for(limit: int, held: int) -> int:
    """Connections that `limit` descriptors allow, `held` of them already taken."""
    return max(0, (limit - held - SPARE) // PER_CONNECTION)


def starting_total(limit: int) -> int:
    """The total before the server has started (refined once it has: Crowd.total); refuses to
    start a portal whose open-file limit leaves room for almost nothing."""
    total = total_for(limit, open_files() + STARTING)
    if total < LEAST:
        need = open_files() + STARTING + SPARE + LEAST * PER_CONNECTION
        raise VmjudgeError(f"vmjudge web may open only {limit} files (RLIMIT_NOFILE), too few to serve even "
                           f"{LEAST} connections at once: raise the limit to at least {need} (ulimit -n, or "
                           "LimitNOFILE= in the portal's systemd unit) and start it again.")
    return total


def per_client(configured: int | None, host: str) -> int:
    """[web] connections_per_client as it applies to a portal listening on `host`: as set, or
    PER_CLIENT unless `host` is loopback, where every client is a reverse proxy in front (0: no
    cap; the proxy keeps one per real client)."""
    if configured is not None:
        return configured
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return 0 if loopback else PER_CLIENT


def client_key(client: tuple[str, int] | None) -> str:
    """Whom a connection is counted against: its IPv4 address, or its IPv6 address's /64."""
    if client is None:
        return "an unknown address"
    try:
        address = ipaddress.ip_address(client[0])
    except ValueError:
        return client[0]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def _answer(status: str, sentence: str) -> bytes:
    body = sentence.encode() + b"\n"
    return (f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\nretry-after: 10\r\nx-content-type-options: nosniff\r\n"
            "cache-control: no-store\r\n\r\n").encode() + body


class Crowd:
    """The connections open now, per client and in all, and the caps on them."""

    def __init__(self, per_client: int, total: int, nofile: int, episodes: Episodes | None = None):
        self.configured, self.nofile = per_client, nofile
        self.episodes = episodes or Episodes()
        self.open: Counter[str] = Counter()
        self.count = 0
        self.total = total

    @property
    def total(self) -> int:
        return self._total

    @total.setter
    def total(self, total: int) -> None:
        self._total = total
        cap = max(1, total // 2)
        self.per_client = min(self.configured, cap) if self.configured else 0

    def admit(self, key: str) -> bytes | None:
        """None if a connection from `key` may be served; otherwise what it is answered before it is closed."""
        if self.count >= self.total:
            self.episodes.happened(
                "total", f"the portal has {self.count} connections open, the most its open-file limit "
                         f"(RLIMIT_NOFILE {self.nofile}) leaves room for: new ones are answered 503 until some close",
                "the portal takes new connections again: {count} were refused over {seconds:.0f} s")
            return _answer("503 Service Unavailable", "The portal is serving as many connections as it can just "
                                                      "now: try again in a minute.")
        if self.per_client and self.open[key] >= self.per_client:
            self.episodes.happened(
                f"client {key}", f"{key} has {self.open[key]} connections open, the most one address may have "
                                 f"([web] connections_per_client): its new ones are answered 429 until some close",
                f"{key} is let connect again: {{count}} of its connections were refused over {{seconds:.0f}} s")
            return _answer("429 Too Many Requests", f"Your address has {self.open[key]} connections open to the "
                                                    "portal, the most it allows: close some, or wait for them to "
                                                    "end, and try again.")
        self.open[key] += 1
        self.count += 1
        return None

    def release(self, key: str) -> None:
        self.count -= 1
        self.open[key] -= 1
        if not self.open[key]:
            del self.open[key]
