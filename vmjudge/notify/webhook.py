"""Webhooks: one HTTPS POST of the message's JSON, signed (signature.py), to a URL of the
organiser's. http only to this machine (config/notify.py checks it when site.toml is read; it is
checked again here, so no caller can send a signed body in the clear). No redirect is followed:
the body goes only where site.toml says. Every socket step is bounded by `timeout`, and the
answer's body is not read beyond its first KiB.

What it says of a delivery names the receiver by its host and port only, never the URL's path
or query: those often hold the webhook's secret (Slack's, Discord's, a `?token=`), and what it
says goes to logs and `vmjudge notify list`. A receiver's answer that quotes the path (a 404
page) has it cut out too."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

from ..config.notify import webhook_ok
from .message import DeliveryError, Message
from .signature import DELIVERY, HEADER, sign
from .smtp import tls_context


def body(message: Message) -> bytes:
    return json.dumps({"kind": message.kind, "delivery": message.delivery, "subject": message.subject,
                       "text": message.text, **message.data}, sort_keys=True).encode()


def post(url: str, secret: bytes, message: Message, timeout: float, ca_file: Path | None = None) -> str:
    """POST `message` to `url`; what the receiver answered. DeliveryError otherwise (permanent
    on a 4xx other than 408 and 429: the receiver will refuse it again)."""
    if not webhook_ok(url):
        raise DeliveryError("the webhook's URL is not an https:// URL (http:// only to this machine)", permanent=True)
    parts = urlsplit(url)
    data = body(message)
    host = parts.hostname or ""
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=tls_context(ca_file))
    else:
        conn = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", path, body=data, headers={
            "Content-Type": "application/json", "User-Agent": "vmjudge", HEADER: sign(secret, data, time.time()),
            DELIVERY: message.delivery})
        answer = conn.getresponse()
        said = answer.read(1024).decode(errors="replace").strip()[:200]
    except (http.client.HTTPException, OSError) as exc:
        raise DeliveryError(_unquoted(f"{parts.netloc}: {type(exc).__name__}: {exc}", path)) from None
    finally:
        conn.close()
    if 200 <= answer.status < 300:
        return f"{parts.netloc} answered {answer.status}"
    permanent = 400 <= answer.status < 500 and answer.status not in (408, 429)
    raise DeliveryError(_unquoted(f"{parts.netloc} answered {answer.status} {said}".strip(), path),
                        permanent=permanent)


def _unquoted(text: str, path: str) -> str:
    """`text` without the request's path and query, nor either alone (a receiver's answer, an
    exception's words may quote them)."""
    base, _, query = path.partition("?")
    for secret in sorted({path, base, query}, key=len, reverse=True):
        if len(secret) > 1:
            text = text.replace(secret, "/…" if secret.startswith("/") else "…")
    return text
