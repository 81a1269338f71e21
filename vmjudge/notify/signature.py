"""The webhooks' signature, and the check a receiver makes (docs/organisers.md, "Monitoring").

    X-Vmjudge-Signature: t=1764190000,n=3f2a9c0d11b7e845,v1=<hex HMAC-SHA256 with the secret of
                         "1764190000.3f2a9c0d11b7e845." followed by the body's bytes>

The timestamp is signed with the body, so a captured request cannot be given a new time; a
receiver refuses a timestamp more than TOLERANCE seconds from its own clock, and a signature it
has already accepted within that window (Replays), so a request replayed later, or at once, is
refused. The nonce n makes every request's signature new, so the judge's own retry of a message
within the same second is not taken for a replay. This is the scheme the big forges and payment
services use; verify() is the reference for receivers written in Python, and the tests'
receiver uses it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

HEADER = "X-Vmjudge-Signature"
DELIVERY = "X-Vmjudge-Delivery"
TOLERANCE = 300.0  # seconds a signed request stays acceptable


def digest(secret: bytes, t: int, nonce: str, body: bytes) -> str:
    return hmac.new(secret, f"{t}.{nonce}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: bytes, body: bytes, at: float, nonce: str | None = None) -> str:
    t, n = int(at), nonce or secrets.token_hex(8)
    return f"t={t},n={n},v1={digest(secret, t, n, body)}"


@dataclass
class Replays:
    """The signatures a receiver accepted in the last TOLERANCE seconds: one seen again is a replay."""

    seen: dict[str, float] = field(default_factory=dict)

    def first_time(self, signature: str, now: float) -> bool:
        self.seen = {s: t for s, t in self.seen.items() if t > now - 2 * TOLERANCE}
        if signature in self.seen:
            return False
        self.seen[signature] = now
        return True


def verify(secret: bytes, body: bytes, header: str, now: float, replays: Replays,
           tolerance: float = TOLERANCE) -> str | None:
    """None if the request is the judge's, fresh and not seen before; else why it is refused."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        t = int(fields["t"])
    except (KeyError, ValueError):
        return "no timestamp"
    expected = digest(secret, t, fields.get("n", ""), body)
    if not hmac.compare_digest(expected, fields.get("v1", "")):
        return "bad signature"
    if abs(now - t) > tolerance:
        return "too old (or from the future)"
    if not replays.first_time(fields["v1"], now):
        return "a replay"
    return None
