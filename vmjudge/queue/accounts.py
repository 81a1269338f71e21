"""Accounts people make on the portal (issue 58, site.toml [portal] registration), and signing in by
a link mailed to an account's confirmed address.

A sign-up is an owner like any other, with a token no one is shown (256 random bits, hashed, as
owners.py keeps every token) and `awaiting` "confirmation": it cannot sign in, and gets no mail but
its confirmation (notify/confirm.py). Following the link confirms the address; the account then
waits for "approval" (registration "approve": `vmjudge owner approve NAME`) or nothing ("open").
One that is never confirmed lapses after the link's own lifetime, and its name is free again.

Every mail a sign-up causes goes to an address a stranger typed, so each is bounded: the portal's
sign-ups per hour (counted on the accounts made), and per address the same limits as the
confirmations of owners.py (CONFIRM_GAP, CONFIRM_PER_DAY), counted on the address, not the
account, so signing up again and again under new names does not fill one mailbox. An address that
already belongs to an account gets that account a sign-in link instead (within its own limits),
and the page says the same either way: whether an address has an account is not told to whoever
types it.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass

from ..notify.confirm import APPROVED, SIGNIN, VALID_SECONDS
from ..notify.confirm import KIND as CONFIRM
from .connection import Database, Db
from .outbox import DAY, HOUR, mail_as_written, mails_to
from .owners import CONFIRM_GAP, CONFIRM_PER_DAY, Owner, OwnerError, TooSoon, checked_email, owner_row, token_hash
from .rows import now, stamp

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,31}")
CONFIRMATION, APPROVAL, TEAM = "confirmation", "approval", "team"  # what owners.awaiting holds (TEAM: teams.py)
LINK_SECONDS = 15 * 60  # a sign-in link's life
LINK_GAP, LINKS_PER_DAY = 60.0, 20  # sign-in links to one address
# The account that holds an address (in any case), may sign in, and is no organiser's: organisers sign in by token.
HOLDER = ("SELECT name, email FROM owners WHERE lower(email) = ? AND email_confirmed_at IS NOT NULL AND "
          "revoked_at IS NULL AND awaiting IS NULL AND organiser = 0 ORDER BY name LIMIT 1")


@dataclass(frozen=True)
class SignUp:
    """What a sign-up did: `mailed` the kind of mail written (a confirmation, or a sign-in link to the
    account that holds the address), None when the limits allowed none now."""

    mailed: str | None


def sign_up_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise OwnerError(f"The name {name[:40]!r} is not allowed: use 2 to 32 letters, digits, '.', '_' or '-', "
                         "beginning with a letter or digit (it is shown on the boards).")
    return name


def _room(db: Db, kind: str, address: str, at: float) -> bool:
    """Whether `address` may be sent another mail of `kind` now: confirmations as owners.py bounds
    them, sign-in links at most one a minute and LINKS_PER_DAY a day."""
    gap, per_day = (CONFIRM_GAP, CONFIRM_PER_DAY) if kind == CONFIRM else (LINK_GAP, LINKS_PER_DAY)
    sent = mails_to(db, kind, address, at - DAY)
    return not (sent and at - sent[-1] < gap) and len(sent) < per_day


class Accounts:
    def __init__(self, database: Database):
        self.database = database

    def sign_up(self, name: str, email: str, confirmation: tuple[str, str], signin: tuple[str, str] | None,
                per_hour: int, at: float | None = None) -> SignUp:
        """Make `name`'s account, awaiting the confirmation of `email`, its mail written in the same
        transaction. OwnerError when the name is taken (by an account that has not lapsed), TooSoon
        when the portal took `per_hour` sign-ups in the last hour. `signin`: the sign-in mail (its
        subject and text, or None) for an address an account holds already."""
        sign_up_name(name)
        email = (checked_email(email) or "").lower()  # one mailbox, however its address is written
        at = time.time() if at is None else at
        with self.database.transaction() as db:
            db.lock("sign-up")  # the portal's count, a name and an address: one sign-up at a time
            made = db.execute("SELECT COUNT(*) FROM owners WHERE signed_up_at > ?", (at - HOUR,)).fetchone()[0]
            if int(made) >= per_hour:
                raise TooSoon("The judge takes no more sign-ups this hour: try again in an hour.")
            row = db.execute("SELECT awaiting, signed_up_at FROM owners WHERE name = ?", (name,)).fetchone()
            lapsed = row is not None and row["awaiting"] == CONFIRMATION and \
                float(row["signed_up_at"] or 0) < at - VALID_SECONDS
            if row is not None and not lapsed:  # first, so that what follows says nothing of the address
                raise OwnerError(f"The name {name!r} is taken: choose another.")
            db.execute("DELETE FROM owners WHERE name = ?", (name,))
            db.execute("INSERT INTO owners (name, token_sha256, organiser, created_at, email, awaiting, signed_up_at) "
                       "VALUES (?, ?, 0, ?, ?, ?, ?)", (name, token_hash(secrets.token_urlsafe(32)), now(), email,
                                                        CONFIRMATION, at))
            holder = db.execute(HOLDER, (email,)).fetchone()
            if holder is not None:  # the name is held all the same (it lapses unconfirmed), and its holder mailed
                return SignUp(self._link(db, holder["name"], holder["email"], signin, at) if signin else None)
            if not _room(db, CONFIRM, email, at):
                return SignUp(None)
            mail_as_written(db, CONFIRM, name, email, *confirmation, at)
        return SignUp(CONFIRM)

    def confirmed(self, name: str, registration: str) -> str | None:
        """After `name` confirmed its address: what it waits for now (None: it may sign in). Only an
        "open" judge lets it in at once: one "closed" since the sign-up waits for the organisers too."""
        then = None if registration == "open" else APPROVAL
        with self.database.transaction() as db:
            db.execute("UPDATE owners SET awaiting = ? WHERE name = ? AND awaiting = ? AND email_confirmed_at IS NOT "
                       "NULL", (then, name, CONFIRMATION))
            row = db.execute("SELECT awaiting FROM owners WHERE name = ?", (name,)).fetchone()
        return None if row is None else row["awaiting"]

    def approve(self, name: str, mail: tuple[str, str] | None) -> None:
        """The organisers' `owner approve`: `name` may sign in from now; `mail` tells it so."""
        with self.database.transaction() as db:
            row = db.execute("SELECT email, awaiting FROM owners WHERE name = ? AND revoked_at IS NULL",
                             (name,)).fetchone()
            if row is None or row["awaiting"] is None:
                raise OwnerError(f"{name!r} is not waiting for approval: `vmjudge owner list` shows who is.")
            if row["awaiting"] != APPROVAL:
                raise OwnerError(f"{name!r} has not confirmed its address yet: it can be approved once it has.")
            db.execute("UPDATE owners SET awaiting = NULL WHERE name = ?", (name,))
            if mail is not None:
                mail_as_written(db, APPROVED, name, row["email"], *mail, time.time())

    def holder(self, email: str) -> str | None:
        """The account that holds `email` confirmed and may sign in, if one does."""
        with self.database.connect() as db:
            row = db.execute(HOLDER, (email.lower(),)).fetchone()
        return None if row is None else str(row["name"])

    def ask_link(self, email: str, mail: tuple[str, str], at: float | None = None) -> bool:
        """A sign-in link mailed to the account that holds `email` confirmed, if there is one and its
        limits allow one now; whether one was written (never told to the person asking)."""
        at = time.time() if at is None else at
        with self.database.transaction() as db:
            row = db.execute(HOLDER, (email.lower(),)).fetchone()
            return row is not None and self._link(db, row["name"], row["email"], mail, at) is not None

    def _link(self, db: Db, name: str, email: str, mail: tuple[str, str], at: float) -> str | None:
        db.lock(f"confirm {name}")
        if not _room(db, SIGNIN, email, at):
            return None
        mail_as_written(db, SIGNIN, name, email, *mail, at)
        return SIGNIN

    def use_link(self, owner: Owner, made_at: float) -> bool:
        """Whether a sign-in link made at `made_at` (checked by the caller) may sign `owner` in: the
        newest one it followed is older. It is then the newest: each link signs in once."""
        with self.database.transaction() as db:
            done = db.execute("UPDATE owners SET link_used_at = ? WHERE name = ? AND revoked_at IS NULL AND awaiting "
                              "IS NULL AND (link_used_at IS NULL OR link_used_at < ?)",
                              (made_at, owner.name, made_at)).rowcount
        return done == 1

    def awaiting_approval(self) -> list[Owner]:
        with self.database.connect() as db:
            rows = db.execute("SELECT * FROM owners WHERE awaiting = ? AND revoked_at IS NULL ORDER BY signed_up_at",
                              (APPROVAL,)).fetchall()
        return [owner_row(r) for r in rows]


def waiting_line(owner: Owner) -> str:
    """What `owner list` says of an account still waiting, or of a team (which never signs in)."""
    if owner.awaiting == TEAM:
        return "a team (`vmjudge team list CHALLENGE` shows its members)"
    return f"waiting for {owner.awaiting} since {stamp(owner.signed_up_at or 0)}"
