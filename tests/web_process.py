"""A real `vmjudge web` process on loopback for the tests that need one: the server itself
(timeouts, slow clients, its log), or two processes sharing one queue. Its stderr, the
organiser's log, goes to a file the test reads."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from .cli import REPO
from .waiting import wait_for

CSRF = re.compile(r'name="csrf" value="([^"]+)"')  # web_home.py's too; not imported from there, which loads
# starlette's TestClient (a deprecation warning on stderr of the benchmarks that import this module's users)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int, proc: subprocess.Popen, said: Callable[[], str]) -> bool:
    """Whether the portal's port takes connections; fails at once, with what the process
    `said`, if it has exited."""
    if proc.poll() is not None:
        raise AssertionError(f"vmjudge web exited ({proc.returncode}): {said()}")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def signed_in_client(base: str, token: str) -> httpx.Client:
    """An HTTP client of the portal at `base`, signed in with `token` through the sign-in form."""
    client = httpx.Client(base_url=base, timeout=30)
    csrf = CSRF.search(client.get("/signin").text)
    assert csrf
    assert client.post("/signin", data={"token": token, "csrf": csrf.group(1)}).status_code == 303
    return client


@dataclass
class Portal:
    base: str
    port: int
    log: Path
    proc: subprocess.Popen

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def running_portal(home: Path, log: Path, files: int | None = None) -> Iterator[Portal]:
    """`vmjudge web` on a free port of 127.0.0.1, its open-file limit `files` if given."""
    port = free_port()

    def limit() -> None:
        if files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "web", "--listen", f"127.0.0.1:{port}",
                                 "--no-secure-cookies"], cwd=REPO, env={**os.environ, "VMJUDGE_HOME": str(home)},
                                stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit)
    try:
        wait_for(lambda: listening(port, proc, log.read_text), 60, "vmjudge web listening on its port")
        yield Portal(f"http://127.0.0.1:{port}", port, log, proc)
    finally:
        proc.send_signal(signal.SIGCONT)  # a test that stopped it
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
