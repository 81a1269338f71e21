"""The address confirmation link's token (notify/confirm.py says what it binds and why): made
and checked with itsdangerous, the portal's own library (its session cookie's), here in the
portal alone: the queue and the notifications are also read by the replica ISO, which carries
no itsdangerous."""

from __future__ import annotations

import time

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from ..notify.confirm import EXPIRED, NOT_VALID, VALID_SECONDS

SALT = "vmjudge email confirmation"
MAX_TOKEN = 512  # characters: a longer one is not the judge's


def _serializer(key: bytes, address: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(key, salt=f"{SALT}\0{address}")


def token(key: bytes, owner: str, address: str) -> str:
    """The link's token for `owner`'s `address`, signed now; it expires VALID_SECONDS later."""
    return _serializer(key, address).dumps(owner)


def named_owner(text: str) -> str | None:
    """The owner a token names, before it is checked (to find the address it must confirm), or
    None when it is not shaped like one of the judge's."""
    if len(text) > MAX_TOKEN:
        return None
    try:
        _, owner = URLSafeTimedSerializer(b"", salt=SALT).loads_unsafe(text)
    except Exception:  # noqa: BLE001 - whatever a made-up token makes the decoder raise, it is no token
        return None
    return owner if isinstance(owner, str) else None


def check(key: bytes, text: str, address: str) -> str | None:
    """None if `text` is the judge's token for the owner it names and `address`, not expired;
    else the one sentence a person following the link reads."""
    try:
        _serializer(key, address).loads(text, max_age=VALID_SECONDS)
    except SignatureExpired:  # raised only once the signature holds
        return EXPIRED
    except BadSignature:
        return NOT_VALID
    return None


SIGNIN_SALT = "vmjudge sign-in link"


def signin_token(key: bytes, owner: str) -> str:
    """A sign-in link's token: the owner and when it was made (the account takes each link once,
    queue/accounts.py use_link), signed now; a salt of its own, so no other token is taken for it."""
    return URLSafeTimedSerializer(key, salt=SIGNIN_SALT).dumps([owner, time.time()])


def signin_check(key: bytes, text: str, max_age: int) -> tuple[str, float] | None:
    """The owner and making time of a sign-in link's token, or None: forged, changed or expired."""
    if len(text) > MAX_TOKEN:
        return None
    try:
        owner, made = URLSafeTimedSerializer(key, salt=SIGNIN_SALT).loads(text, max_age=max_age)
    except (BadSignature, ValueError, TypeError):
        return None
    return (owner, float(made)) if isinstance(owner, str) and isinstance(made, float) else None
