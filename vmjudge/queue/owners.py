"""The portal's accounts: who may sign in to `vmjudge web`, and as which owner.

An owner's sign-in token is shown once, when the organiser adds the owner, and only its
sha256 is kept: a copy of the queue's database lets no one sign in. Tokens are 256 random
bits, so a plain hash is enough (no salt or slow hash needed, unlike a password), and the
lookup compares the hashes in constant time. Revoking an owner takes effect on the next
request, sessions included, because the portal reads the account on every request.

Signing out is kept here too, as the time it happened: a session cookie is signed, not stored,
so clearing it in the browser that signed out leaves any copy of it (another device, a stolen
one) valid until it expires. Every session of the owner begun before that time is over.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

from ..config.notify import email_ok
from ..errors import VmjudgeError
from .connection import Database
from .rows import now


class OwnerError(VmjudgeError):
    """An owner that cannot be added or revoked as asked."""


@dataclass(frozen=True)
class Owner:
    name: str
    organiser: bool
    created_at: str
    revoked_at: str | None
    token_sha256: str
    signed_out_at: float | None = None  # epoch seconds: sessions begun before it are over
    email: str | None = None  # where the owner hears of its entries (issue 35); None: not at all

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def session_mark(self) -> str:
        """What a session keeps of the token: a session signed in with a token that was
        replaced since (the owner revoked and added again) no longer matches."""
        return self.token_sha256[:32]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _owner(r: Any) -> Owner:
    """From a row (sqlite3.Row or pg_row.Row), read by column name."""
    return Owner(name=r["name"], organiser=bool(r["organiser"]), created_at=r["created_at"],
                 revoked_at=r["revoked_at"], token_sha256=r["token_sha256"], signed_out_at=r["signed_out_at"],
                 email=r["email"])


def checked_email(email: str | None) -> str | None:
    if email is not None and not email_ok(email):
        raise OwnerError(f"The address {email!r} is not allowed: give one plain address such as "
                         "\"ana@example.org\" (no name, no spaces).")
    return email


class Owners:
    """The owners table of the queue's database (SQLite or PostgreSQL alike)."""

    def __init__(self, database: Database):
        self.database = database

    def add(self, name: str, organiser: bool = False, email: str | None = None) -> str:
        """Add `name` (or give a revoked one a new token) and return its token, which is stored
        nowhere: the caller shows it once. An active owner is refused: revoke it first. `email`:
        the owner opts in to hear of its entries there."""
        checked_email(email)
        if not name or len(name) > 64 or not name.isprintable() or name != name.strip():
            raise OwnerError(f"The owner {name!r} is not allowed: use at most 64 printable characters (no control "
                             "characters, newlines, invisible formatting or spaces at either end).")
        token = secrets.token_urlsafe(32)
        with self.database.transaction() as db:
            row = db.execute("SELECT revoked_at FROM owners WHERE name = ?", (name,)).fetchone()
            if row is not None and row["revoked_at"] is None:
                raise OwnerError(f"the owner {name!r} already has a token: `vmjudge owner revoke {name}` first, "
                                 "then add it again for a new one.")
            db.execute("INSERT INTO owners (name, token_sha256, organiser, created_at, revoked_at, email) "
                       "VALUES (?, ?, ?, ?, NULL, ?) ON CONFLICT(name) DO UPDATE SET token_sha256 = "
                       "excluded.token_sha256, organiser = excluded.organiser, created_at = excluded.created_at, "
                       "revoked_at = NULL, email = excluded.email", (name, token_hash(token), int(organiser), now(),
                                                                     email))
        return token

    def set_email(self, name: str, email: str | None) -> None:
        """Where `name` hears of its entries from now on; None: nowhere (messages not yet sent
        are dropped when their time comes)."""
        checked_email(email)
        with self.database.transaction() as db:
            done = db.execute("UPDATE owners SET email = ? WHERE name = ? AND revoked_at IS NULL",
                              (email, name)).rowcount
        if done != 1:
            raise OwnerError(f"no owner named {name!r} holds a token: `vmjudge owner list` shows who does.")

    def revoke(self, name: str) -> None:
        with self.database.transaction() as db:
            done = db.execute("UPDATE owners SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
                              (now(), name)).rowcount
        if done != 1:
            raise OwnerError(f"no owner named {name!r} holds a token: `vmjudge owner list` shows who does.")

    def all(self) -> list[Owner]:
        with self.database.connect() as db:
            rows = db.execute("SELECT * FROM owners ORDER BY name").fetchall()
        return [_owner(r) for r in rows]

    def get(self, name: str) -> Owner | None:
        """The owner named so, active or revoked; None if there is none."""
        with self.database.connect() as db:
            row = db.execute("SELECT * FROM owners WHERE name = ?", (name,)).fetchone()
        return None if row is None else _owner(row)

    def by_token(self, token: str) -> Owner | None:
        """The active owner whose token this is, or None."""
        wanted = token_hash(token)
        with self.database.connect() as db:
            row = db.execute("SELECT * FROM owners WHERE token_sha256 = ? AND revoked_at IS NULL",
                             (wanted,)).fetchone()
        if row is None or not hmac.compare_digest(str(row["token_sha256"]), wanted):
            return None
        return _owner(row)

    def by_session(self, name: str, mark: str, since: float) -> Owner | None:
        """The active owner a session names, if the session was signed in with its current token
        at `since` (epoch seconds), after the owner last signed out."""
        owner = self.get(name)
        if owner is None or not owner.active or not hmac.compare_digest(owner.session_mark, mark):
            return None
        if owner.signed_out_at is not None and since <= owner.signed_out_at:
            return None
        return owner

    def sign_out(self, name: str) -> None:
        """End every session of `name` begun until now."""
        with self.database.transaction() as db:
            db.execute("UPDATE owners SET signed_out_at = ? WHERE name = ?", (time.time(), name))
