"""What every page of the portal needs: the home and its queue, who is signed in, the CSRF
token of the session, and the page templates.

Who is signed in is read from the queue on every request, not trusted from the cookie: the
cookie (signed) names the owner, a mark of the token it signed in with and when, and the owner
must still hold that token and not have signed out since, so `vmjudge owner revoke` and "Sign
out" end live sessions at once, copies of the cookie included.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..config import Site, load_challenge
from ..errors import VmjudgeError
from ..queue.connection import QueueUnavailable
from ..queue.db import Queue
from ..queue.owners import Owner, Owners
from ..queue.rows import EntryRow
from ..queue.teams import Teams
from ..terminal import printable
from .builds import Builds
from .checks import Checker
from .gate import Gate

HERE = Path(__file__).resolve().parent
FORM_OVERHEAD = 64 * 1024  # the multipart fields and headers around an uploaded archive
PAGE_SIZE = 25  # entries per page: 10 000 entries never make a 10 000-row page


def templates() -> jinja2.Environment:
    """Every value is escaped unless a template says otherwise (none does); `printable` shows
    control and bidi characters of entry output as visible escapes, as on a terminal."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["printable"] = printable
    return env


@dataclass
class Portal:
    """`upload_io` bounds the threads that take uploads in (sign-in, bodies written to disk, the
    admission's transaction): an anyio limiter of its own, apart from the one the page handlers
    run on, so pages never wait for a thread behind uploads. `checker` checks archives in worker
    processes (checks.py)."""

    site: Site
    queue: Queue
    owners: Owners
    pages: jinja2.Environment
    gate: Gate
    upload_io: anyio.CapacityLimiter
    checker: Checker
    builds: Builds = field(default_factory=Builds)  # downloads made aside (a replica ISO)
    secure_cookies: bool = True

    # who is signed in

    def signed_in(self, request: Request) -> Owner | None:
        name, mark, since = request.session.get("owner"), request.session.get("mark"), request.session.get("since")
        if not isinstance(name, str) or not isinstance(mark, str):
            return None
        owner = self.owners.by_session(name, mark, since if isinstance(since, (int, float)) else 0.0)
        if owner is None:  # revoked, given a new token, or signed out since: this session ends here
            for key in ("owner", "mark", "since"):
                request.session.pop(key, None)
        return owner

    def sign_in(self, request: Request, owner: Owner) -> None:
        request.session.clear()  # a new session: nothing chosen before signing in carries over
        request.session.update({"owner": owner.name, "mark": owner.session_mark, "since": time.time(),
                                "csrf": secrets.token_urlsafe(32)})

    def sign_out(self, request: Request) -> None:
        """End the session here and on the server: every session of the owner begun until now,
        so a copy of the cookie is worth nothing either."""
        owner = self.signed_in(request)
        if owner is not None:
            self.owners.sign_out(owner.name)
        request.session.clear()

    def participant(self, request: Request) -> Owner:
        """The signed-in owner, or 401 (the page says to sign in)."""
        owner = self.signed_in(request)
        if owner is None:
            raise HTTPException(401, "Sign in with your token to see this page.")
        return owner

    def bearer(self, request: Request) -> Owner | None:
        """The owner `Authorization: Bearer TOKEN` signs in; None when the request sends no token, 401
        when the token it sends signs no one in (the API's way, and a download's fetched with curl)."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        owner = self.owners.by_token(token.strip())
        if owner is None:
            raise HTTPException(401, "That token does not sign anyone in (it may have been revoked): check it, or "
                                     "ask the organisers for a new one.", headers={"WWW-Authenticate": "Bearer"})
        return owner

    def reader(self, request: Request) -> Owner:
        """The signed-in owner, by a bearer token or the session, or 401. Only for what a GET gives: no
        form is posted on a bearer token's word here."""
        return self.bearer(request) or self.participant(request)

    def organiser(self, request: Request) -> Owner:
        """The signed-in organiser; anyone else gets 404, as if the page did not exist."""
        owner = self.participant(request)
        if not owner.organiser:
            raise HTTPException(404, "There is no such page.")
        return owner

    # CSRF: a random token per session, in every form, checked on every POST

    def csrf_token(self, request: Request) -> str:
        token = request.session.get("csrf")
        if not isinstance(token, str):
            token = secrets.token_urlsafe(32)
            request.session["csrf"] = token
        return token

    def check_csrf(self, request: Request, sent: object) -> None:
        token = request.session.get("csrf")
        if not isinstance(token, str) or not isinstance(sent, str) or not hmac.compare_digest(token, sent):
            raise HTTPException(403, "This form's safety token is missing or out of date (forms expire when you "
                                     "sign in or out): reload the page and send it again.")

    # entries and challenges

    def queue_entry_or_404(self, entry_id: int) -> EntryRow:
        try:
            return self.queue.entry(entry_id)
        except QueueUnavailable:
            raise  # the judge's trouble, not a missing entry: failures.py answers 503
        except VmjudgeError:
            raise HTTPException(404, f"There is no entry {entry_id}.") from None

    def seen_as_own(self, owner: Owner) -> tuple[str, ...]:
        """The owners whose entries `owner` sees as its own: itself and its teams (queue/teams.py)."""
        return Teams(self.queue.database).owners_seen_by(owner.name)

    def own_entry(self, owner: Owner, entry_id: int) -> EntryRow:
        """The owner's entry, or its team's; 404 otherwise: another owner's entry is not confirmed to exist."""
        try:
            entry = self.queue.entry(entry_id)
        except QueueUnavailable:
            raise
        except VmjudgeError:
            entry = None
        if entry is None or entry.owner not in self.seen_as_own(owner):
            raise HTTPException(404, f"You have no entry {entry_id}.")
        return entry

    def challenge_dir(self, name: str) -> Path:
        """The challenge's directory on this host; 400 for a name no challenge has (the queue's
        own sentence tells the organiser to run `vmjudge challenge add`)."""
        try:
            return self.queue.challenge_dir(name)
        except QueueUnavailable:
            raise
        except VmjudgeError:
            raise HTTPException(400, f"There is no challenge named {name[:64]!r}: choose one of those the portal's "
                                     "home page lists (/, or GET /api/challenges) and submit again.") from None

    def challenge_names(self) -> list[str]:
        return [row["name"] for row in self.queue.challenges()]

    def upload_cap(self) -> int:
        """The largest body an upload may have: the largest archive any challenge accepts, and
        the form around it (each challenge's own cap is applied as the archive streams)."""
        largest = 0
        for name in self.challenge_names():
            try:
                largest = max(largest, load_challenge(self.queue.challenge_dir(name)).entry.max_size)
            except VmjudgeError:
                continue  # a challenge whose copy is not on this host accepts nothing here
        return largest + FORM_OVERHEAD

    # pages

    def page(self, request: Request, template: str, status: int = 200, **values: Any) -> Response:
        owner = self.signed_in(request)
        html = self.pages.get_template(template).render(
            me=owner, csrf=self.csrf_token(request), path=request.url.path, **values)
        return Response(html, status_code=status, media_type="text/html; charset=utf-8")
