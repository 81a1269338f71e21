"""A throw-away S3-speaking server for the object store's tests, started as tests/pg_server.py starts
PostgreSQL: moto's standalone server (setup.cfg's test extra says why that one), on a free loopback
port, waited for until it answers, killed and gone afterwards. And HoldingProxy: a TCP proxy in front
of it that can hold the server's replies back, which is what a slow store looks like to the judge.

moto keeps its objects in memory and accepts any credentials; it is S3 as moto's authors read AWS."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .waiting import wait_for

MOTO_SERVER = Path(sys.executable).parent / "moto_server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(endpoint: str) -> bool:
    """Whether an S3 request (a listing of the buckets) is answered at all."""
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen

    def kill(self) -> None:
        """Gone at once, as a crashed store is: nothing is listening on its port afterwards."""
        self.process.kill()
        self.process.wait(timeout=30)


@contextmanager
def s3_server(log: Path) -> Iterator[S3Server]:
    """A running server; yields it (its endpoint http://127.0.0.1:PORT). Its output goes to `log`."""
    if not MOTO_SERVER.exists():
        raise RuntimeError(f"{MOTO_SERVER} is not installed: run `make setup` (the test extra's moto[server]).")
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                   stderr=subprocess.STDOUT)
    server = S3Server(f"http://127.0.0.1:{port}", process)
    try:
        wait_for(lambda: process.poll() is not None or answers(server.endpoint), 60, "moto's S3 server answering")
        if process.poll() is not None:
            raise RuntimeError(f"moto's S3 server stopped as it started: {log.read_text()[-2000:]}")
        yield server
    finally:
        if process.poll() is None:
            server.kill()


class HoldingProxy:
    """Forwards loopback connections to `upstream` (host, port), byte for byte; while `hold` is
    set, whatever the server sends back is kept until the proxy closes: the request arrives, its
    reply never does. Threads of its own, all ended by close()."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.hold = threading.Event()
        self.closed = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        self.held = 0  # replies held back so far
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            for source, sink, replies in ((client, server, False), (server, client, True)):
                thread = threading.Thread(target=self._pump, args=(source, sink, replies), daemon=True)
                self.threads.append(thread)
                thread.start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if replies and self.hold.is_set():
                    self.held += 1
                    self.closed.wait()  # held until the proxy closes: longer than any read timeout
                    return
                sink.sendall(data)
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Everything ended: a socket is shut down before it is closed, which is what wakes a
        thread blocked reading it (closing alone does not)."""
        self.closed.set()
        for s in (self.listener, *self.sockets):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for thread in self.threads:
            thread.join(timeout=10)
