"""The link that confirms a participant's address (issue 54), and the one mail that carries it.

An address a participant types on the portal is only a claim: without a check, the judge's
mail server would send the organisers' mail to any address a participant chose. So the
address is used only after the reader of its mailbox follows a link sent to it:

    PORTAL/settings/confirm?token=<owner, base64url>.<until, epoch seconds>.<mac, base64url>

    mac = HMAC-SHA256(key, b"vmjudge email confirmation\\0" + owner + b"\\0" + address + b"\\0" + until)

The key is the portal's own secret (HOME/web-session.key, web/secret.py), so only the judge
makes tokens; the fixed prefix keeps a token from ever being taken for a session cookie's
signature or the other way round. The mac binds the owner, the address and the expiry: a token
given another owner's name, a later expiry, or followed after the owner changed its address
fails the check (compared in constant time), and one past `until` has expired. The address is
not in the token: it is the owner's current one, read when the link is followed, so the link
carries no text the participant chose.

The mail itself says only what the judge says: the portal's address (the organisers'), the
address it went to, the link and when it expires. No owner name (an organiser may have taken
it from the participant), no text of the participant's: the portal cannot be used to send
chosen words to a stranger.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from dataclasses import dataclass

KIND = "email-confirm"  # its outbox rows' kind
VALID_SECONDS = 24 * 3600
PREFIX = b"vmjudge email confirmation\0"
MAX_TOKEN = 512  # characters: a longer one is not the judge's


NOT_VALID = ("This link is not valid: it was changed, or the address it confirms is no longer the one set; sign in "
             "and send a new link from Settings.")
EXPIRED = (f"This link has expired (a link lasts {VALID_SECONDS // 3600} hours): sign in and send a new link from "
           "Settings.")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, owner: str, address: str, until: int) -> str:
    data = PREFIX + b"\0".join(part.encode("utf-8", "surrogatepass") for part in (owner, address, str(until)))
    return _b64(hmac.new(key, data, hashlib.sha256).digest())


def token(key: bytes, owner: str, address: str, until: int) -> str:
    return f"{_b64(owner.encode('utf-8', 'surrogatepass'))}.{until}.{_mac(key, owner, address, until)}"


@dataclass(frozen=True)
class Claim:
    """What a token says before it is checked: the owner it names and until when."""

    owner: str
    until: int
    mac: str


def read(text: str) -> Claim | None:
    """The token's parts, or None when it is not shaped like one of the judge's."""
    parts = text.split(".")
    if len(text) > MAX_TOKEN or len(parts) != 3 or not parts[1].isascii() or not parts[1].isdigit():
        return None
    try:
        owner = _unb64(parts[0]).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return Claim(owner, int(parts[1]), parts[2])


def check(key: bytes, claim: Claim, address: str, now: float | None = None) -> str | None:
    """None if `claim` is the judge's token for its owner and `address`, not expired; else the
    one sentence a person following the link reads."""
    expected = _mac(key, claim.owner, address, claim.until)
    if not hmac.compare_digest(expected.encode(), claim.mac.encode("utf-8", "surrogatepass")):
        return NOT_VALID
    if (time.time() if now is None else now) > claim.until:
        return EXPIRED
    return None


def mail(portal_url: str, address: str, link_token: str, until: int) -> tuple[str, str]:
    """The confirmation's subject and text: the judge's words, the address and the link only."""
    expires = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(until))
    text = (f"Someone using the judge at {portal_url} asked for its emails about their entries to go to {address}.\n\n"
            f"If that was you, open this link and press \"Confirm\" (it works until {expires}):\n\n"
            f"{portal_url}/settings/confirm?token={link_token}\n\n"
            "If it was not you, ignore this message: nothing more is sent to this address unless the link is "
            "followed.\n")
    return "Confirm your address for the judge's emails", text
