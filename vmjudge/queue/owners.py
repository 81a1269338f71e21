"""The portal's accounts: who may sign in to `vmjudge web`, and as which owner.

An owner's sign-in token is shown once, when the organiser adds the owner, and only its
sha256 is kept: a copy of the queue's database lets no one sign in. Tokens are 256 random
bits, so a plain hash is enough (no salt or slow hash needed, unlike a password), and the
lookup compares the hashes in constant time. Revoking an owner takes effect on the next
request, sessions included, because the portal reads the account on every request.

Signing out is kept here too, as the time it happened: a session cookie is signed, not stored,
so clearing it in the browser that signed out leaves any copy of it (another device, a stolen
one) valid until it expires. Every session of the owner begun before that time is over.

An owner's address (issue 35) is used only once confirmed (issue 54): an address the organiser
types (`vmjudge owner add|set --email`) is trusted as typed; one a participant sets on the
portal (ask_email) is kept unconfirmed, sent nothing but one mail with a link only its reader
can follow (notify/confirm.py), at most one such mail per owner every CONFIRM_GAP seconds and
CONFIRM_PER_DAY a day, so the portal cannot be used to fill a stranger's mailbox. Changing the
address makes it unconfirmed again; recipient() is what every sender asks before mailing an
owner.
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
from .outbox import CONFIRM, DAY, OutboxRow, confirmation, confirmations_since, mails_to
from .rows import now, stamp

CONFIRM_GAP = 600.0  # seconds between two confirmation mails of one owner
CONFIRM_PER_DAY = 5  # confirmation mails of one owner in any 24 hours


class OwnerError(VmjudgeError):
    """An owner that cannot be added or revoked as asked."""


class TooSoon(OwnerError):
    """A confirmation mail asked for before the limits allow another (the portal's 429)."""


@dataclass(frozen=True)
class Owner:
    name: str
    organiser: bool
    created_at: str
    revoked_at: str | None
    token_sha256: str
    signed_out_at: float | None = None  # epoch seconds: sessions begun before it are over
    email: str | None = None  # where the owner hears of its entries (issue 35); None: not at all
    email_confirmed_at: float | None = None  # epoch seconds; None: `email` is unconfirmed and gets nothing
    awaiting: str | None = None  # a portal sign-up's: "confirmation" of its address, then "approval" (accounts.py)
    signed_up_at: float | None = None
    link_used_at: float | None = None  # when the newest sign-in link it followed was made

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def can_sign_in(self) -> bool:
        return self.revoked_at is None and self.awaiting is None

    @property
    def confirmed_email(self) -> str | None:
        """The address the owner's notifications may go to: its address once confirmed."""
        return self.email if self.email_confirmed_at is not None else None

    @property
    def session_mark(self) -> str:
        """What a session keeps of the token: a session signed in with a token that was
        replaced since (the owner revoked and added again) no longer matches."""
        return self.token_sha256[:32]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def owner_row(r: Any) -> Owner:
    """From a row (sqlite3.Row or pg_row.Row), read by column name."""
    return Owner(name=r["name"], organiser=bool(r["organiser"]), created_at=r["created_at"],
                 revoked_at=r["revoked_at"], token_sha256=r["token_sha256"], signed_out_at=r["signed_out_at"],
                 email=r["email"], email_confirmed_at=r["email_confirmed_at"], awaiting=r["awaiting"],
                 signed_up_at=r["signed_up_at"], link_used_at=r["link_used_at"])


def checked_email(email: str | None) -> str | None:
    """`email` if it is one plain address on a domain of the Internet. A dotless domain
    ("root@mailhub", "a@localhost") or a numeric one is a host of the judge's own network, which
    the organisers' mail server would deliver to: no participant's address is such a host."""
    if email is not None and not email_ok(email):
        raise OwnerError(f"The address {email!r} is not allowed: give one plain address such as "
                         "\"ana@example.org\" (no name, no spaces).")
    labels = (email or "@x.y").rpartition("@")[2].split(".")
    if len(labels) < 2 or not all(labels) or labels[-1].isdigit():
        raise OwnerError(f"The address {email!r} is not allowed: its domain must have a dot and end in a name, "
                         "such as \"ana@example.org\" (not a local host name such as \"mailhub\", nor an IP "
                         "address).")
    return email


class Owners:
    """The owners table of the queue's database (SQLite or PostgreSQL alike)."""

    def __init__(self, database: Database):
        self.database = database

    def add(self, name: str, organiser: bool = False, email: str | None = None) -> str:
        """Add `name` (or give a revoked one a new token) and return its token, which is stored
        nowhere: the caller shows it once. An active owner is refused: revoke it first. `email`:
        the owner opts in to hear of its entries there, trusted (confirmed) since the organiser
        typed it."""
        checked_email(email)
        if not name or len(name) > 64 or not name.isprintable() or name != name.strip():
            raise OwnerError(f"The owner {name!r} is not allowed: use at most 64 printable characters (no control "
                             "characters, newlines, invisible formatting or spaces at either end).")
        token = secrets.token_urlsafe(32)
        with self.database.transaction() as db:
            row = db.execute("SELECT revoked_at, awaiting FROM owners WHERE name = ?", (name,)).fetchone()
            if row is not None and row["awaiting"] == "team":  # a team never signs in (teams.py)
                raise OwnerError(f"{name!r} is a team's name: choose another for a person.")
            if row is not None and row["revoked_at"] is None:
                raise OwnerError(f"the owner {name!r} already has a token: `vmjudge owner revoke {name}` first, "
                                 "then add it again for a new one.")
            db.execute("INSERT INTO owners (name, token_sha256, organiser, created_at, revoked_at, email, "
                       "email_confirmed_at) VALUES (?, ?, ?, ?, NULL, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                       "token_sha256 = excluded.token_sha256, organiser = excluded.organiser, created_at = "
                       "excluded.created_at, revoked_at = NULL, email = excluded.email, email_confirmed_at = "
                       "excluded.email_confirmed_at, awaiting = NULL",
                       (name, token_hash(token), int(organiser), now(), email, time.time() if email else None))
        return token

    def set_email(self, name: str, email: str | None) -> None:
        """The organiser's `owner set --email`, or anyone's clearing: where `name` hears of its
        entries from now on, trusted (confirmed) since the organiser typed it; None: nowhere
        (messages not yet sent are dropped when their time comes)."""
        checked_email(email)
        with self.database.transaction() as db:
            done = db.execute("UPDATE owners SET email = ?, email_confirmed_at = ? WHERE name = ? AND revoked_at IS "
                              "NULL", (email, time.time() if email else None, name)).rowcount
        if done != 1:
            raise OwnerError(f"no owner named {name!r} holds a token: `vmjudge owner list` shows who does.")

    def ask_email(self, name: str, email: str, mail: tuple[str, str], at: float | None = None) -> bool:
        """The portal's: `name` asks to hear of its entries at `email`. Kept unconfirmed, and its
        confirmation mail written in the same transaction, unless the limits refuse one now
        (TooSoon, nothing changed). The owner's address already, confirmed: nothing to do, False.
        The same address unconfirmed: its mail sent again. `mail`: its subject and text, the
        link in it (the portal makes them: web/settings.py)."""
        checked_email(email)
        at = time.time() if at is None else at
        with self.database.transaction() as db:
            db.lock(f"confirm {name}")  # two requests at once: one counts the other's mail
            row = db.execute("SELECT email, email_confirmed_at FROM owners WHERE name = ? AND revoked_at IS NULL",
                             (name,)).fetchone()
            if row is None:
                raise OwnerError(f"no owner named {name!r} holds a token: `vmjudge owner list` shows who does.")
            if row["email"] == email and row["email_confirmed_at"] is not None:
                return False
            _limit(confirmations_since(db, name, at - DAY), at)
            to_address = mails_to(db, CONFIRM, email, at - DAY)  # and to the address, whichever owners ask (a
            if len(to_address) >= CONFIRM_PER_DAY:  # team's mailbox may serve several: no gap between them)
                _limit(to_address, at)
            db.execute("UPDATE owners SET email = ?, email_confirmed_at = NULL WHERE name = ?", (email, name))
            confirmation(db, name, email, *mail, at)
        return True

    def confirm(self, name: str, email: str) -> bool:
        """Mark `email` confirmed, if it is still `name`'s address (its link was checked by the
        caller); whether it is now confirmed."""
        with self.database.transaction() as db:
            db.execute("UPDATE owners SET email_confirmed_at = ? WHERE name = ? AND email = ? AND revoked_at IS NULL "
                       "AND email_confirmed_at IS NULL", (time.time(), name, email))
            row = db.execute("SELECT email_confirmed_at FROM owners WHERE name = ? AND email = ? AND revoked_at IS "
                             "NULL", (name, email)).fetchone()
        return row is not None and row["email_confirmed_at"] is not None

    def recipient(self, row: OutboxRow) -> str:
        """The address an owner's outbox row may go to now; VmjudgeError (the row is dropped)
        when none: the owner revoked or without an address, the address unconfirmed (any row but
        its confirmation), or for a confirmation, the address changed or confirmed since; for a mail
        written for one address (a sign-in link), that address no longer the owner's."""
        owner = self.get(row.owner or "")
        if owner is None or not owner.active or not owner.email:
            raise VmjudgeError(f"the owner {row.owner!r} gives no address now")
        if row.kind == CONFIRM:
            if owner.email != row.address or owner.email_confirmed_at is not None:
                raise VmjudgeError(f"the owner {row.owner!r} changed or confirmed its address since")
            return owner.email
        if owner.confirmed_email is None:
            raise VmjudgeError(f"the address of the owner {row.owner!r} is not confirmed")
        if row.address is not None and row.address != owner.confirmed_email:  # a sign-in link, an approval
            raise VmjudgeError(f"the owner {row.owner!r} changed its address since")
        return owner.confirmed_email

    def new_token(self, name: str) -> str:
        """A new token for `name`, which may sign in (Settings' "Make a new API token"): shown once by
        the caller; the old one, and every session signed in before, stop at once."""
        token = secrets.token_urlsafe(32)
        with self.database.transaction() as db:
            done = db.execute("UPDATE owners SET token_sha256 = ? WHERE name = ? AND revoked_at IS NULL AND awaiting "
                              "IS NULL", (token_hash(token), name)).rowcount
        if done != 1:
            raise OwnerError(f"{name!r} cannot sign in, so it gets no token.")
        return token

    def revoke(self, name: str) -> None:
        with self.database.transaction() as db:
            done = db.execute("UPDATE owners SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
                              (now(), name)).rowcount
        if done != 1:
            raise OwnerError(f"no owner named {name!r} holds a token: `vmjudge owner list` shows who does.")

    def all(self) -> list[Owner]:
        with self.database.connect() as db:
            rows = db.execute("SELECT * FROM owners ORDER BY name").fetchall()
        return [owner_row(r) for r in rows]

    def get(self, name: str) -> Owner | None:
        """The owner named so, active or revoked; None if there is none."""
        with self.database.connect() as db:
            row = db.execute("SELECT * FROM owners WHERE name = ?", (name,)).fetchone()
        return None if row is None else owner_row(row)

    def by_token(self, token: str) -> Owner | None:
        """The active owner whose token this is, or None."""
        wanted = token_hash(token)
        with self.database.connect() as db:
            row = db.execute("SELECT * FROM owners WHERE token_sha256 = ? AND revoked_at IS NULL AND awaiting IS NULL",
                             (wanted,)).fetchone()
        if row is None or not hmac.compare_digest(str(row["token_sha256"]), wanted):
            return None
        return owner_row(row)

    def by_session(self, name: str, mark: str, since: float) -> Owner | None:
        """The active owner a session names, if the session was signed in with its current token
        at `since` (epoch seconds), after the owner last signed out."""
        owner = self.get(name)
        if owner is None or not owner.can_sign_in or not hmac.compare_digest(owner.session_mark, mark):
            return None
        if owner.signed_out_at is not None and since <= owner.signed_out_at:
            return None
        return owner

    def sign_out(self, name: str) -> None:
        """End every session of `name` begun until now."""
        with self.database.transaction() as db:
            db.execute("UPDATE owners SET signed_out_at = ? WHERE name = ?", (time.time(), name))


def _limit(sent: list[float], at: float) -> None:
    """TooSoon, in one sentence saying when to ask again, if the confirmation mails `sent` in
    the last day (oldest first) leave none for now."""
    if sent and at - sent[-1] < CONFIRM_GAP:
        raise TooSoon(f"A confirmation mail was sent less than {CONFIRM_GAP / 60:g} minutes ago: check your mailbox, "
                      f"or ask again after {stamp(sent[-1] + CONFIRM_GAP)}.")
    if len(sent) >= CONFIRM_PER_DAY:
        raise TooSoon(f"{CONFIRM_PER_DAY} confirmation mails were sent in the last day, the most allowed: ask again "
                      f"after {stamp(sent[-CONFIRM_PER_DAY] + DAY)}.")
