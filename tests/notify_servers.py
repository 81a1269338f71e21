"""Real servers for the notifications' tests, on loopback: an SMTP server (aiosmtpd) that keeps
what it accepts, with STARTTLS, implicit TLS and AUTH when asked; an HTTP receiver that checks
each webhook by the documented check (vmjudge/notify/signature.py) and can answer a status or
hang; and a throw-away certificate authority's server certificate for 127.0.0.1 (openssl)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from vmjudge.notify.signature import DELIVERY, HEADER, Replays, verify


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Certificate:
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def self_signed(directory: Path) -> Certificate:
    """A certificate for 127.0.0.1 that is its own authority: trusted by naming it as ca_file."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return Certificate(cert, key)


@dataclass
class Mailbox:
    """What the SMTP server accepted, with when (time.time()) it accepted each."""

    mails: list[tuple[float, list[str], Message]] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.mails.append((time.time(), list(envelope.rcpt_tos), message_from_bytes(envelope.content)))
        return "250 OK kept"

    def to(self, address: str) -> list[Message]:
        with self.lock:
            return [m for _, rcpt, m in self.mails if address in rcpt]


class SmtpServer:
    """aiosmtpd on 127.0.0.1:`port`. security: "none", "starttls" (required) or "tls"; with
    `login` (user, password), AUTH is required and checked."""

    def __init__(self, port: int | None = None, security: str = "none", cert: Certificate | None = None,
                 login: tuple[str, str] | None = None):
        self.port = port or free_port()
        self.mailbox = Mailbox()
        kwargs: dict[str, Any] = {}
        if security == "starttls":
            assert cert is not None
            kwargs.update(tls_context=cert.server_context(), require_starttls=True)
        if login is not None:
            def check(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
                ok = (data.login.decode(), data.password.decode()) == login
                if ok:
                    self.mailbox.logins.append(data.login.decode())
                return AuthResult(success=ok)
            kwargs.update(authenticator=check, auth_required=True, auth_require_tls=security != "none")
        if security == "tls":
            assert cert is not None
            kwargs.update(ssl_context=cert.server_context(), server_hostname="127.0.0.1")
        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=self.port, **kwargs)

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()


@dataclass
class Received:
    at: float
    path: str
    headers: dict[str, str]
    body: bytes
    refused: str | None  # why the documented check refused it; None: accepted

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


class Receiver:
    """An HTTP server on loopback that checks each POST's signature as the organisers' guide says a receiver
    should, and answers `status` (a list: one per request, the last repeated) after `delay`
    seconds, or hangs until released when `hang` is set."""

    def __init__(self, secret: bytes, statuses: tuple[int, ...] = (200,), hang: bool = False, delay: float = 0.0):
        self.secret, self.statuses, self.hang, self.delay = secret, list(statuses), hang, delay
        self.replays = Replays()
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.released = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    refused = verify(outer.secret, body, self.headers.get(HEADER, ""), time.time(), outer.replays)
                    outer.received.append(Received(time.time(), self.path, dict(self.headers), body, refused))
                    status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                if outer.hang:
                    outer.released.wait(60)
                    return
                time.sleep(outer.delay)
                self.send_response(400 if refused else status)
                self.end_headers()
                self.wfile.write(b"refused: " + refused.encode() if refused else b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def accepted(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.refused is None]

    def deliveries(self) -> list[str]:
        return [r.headers[DELIVERY] for r in self.accepted()]
