"""Signing up on the portal, and signing in by a link mailed to the account's address (issue 58).

`/signup` exists while site.toml's [portal] registration is "approve" or "open": a name and an
address make an account that waits for its address's confirmation (the link of notify/confirm.py,
followed on /settings/confirm as an address set on Settings is), then, with "approve", for the
organisers' `vmjudge owner approve`. queue/accounts.py bounds every mail this sends.

`/signin/mail` mails a link to the account whose confirmed address is given; the page says the same
whether there is one or not. The link (`/signin/link?token=...`, web/confirm_link.py) lasts
LINK_SECONDS and signs in once; opening it changes nothing (mail scanners open links), its page's
button does. Sign-up and the links need the mail the judge sends: without [notify] portal_url and
[notify.smtp], the pages say that accounts are the organisers' to make.
"""

from __future__ import annotations

import logging
import time

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..notify import confirm
from ..queue.accounts import LINK_SECONDS, Accounts
from ..queue.owners import OwnerError, TooSoon
from . import confirm_link
from .portal import Portal
from .secret import session_key

log = logging.getLogger(__name__)
LINK_SENT = ("If an account uses that address, a link to sign in is on its way to it: it works once, for "
             f"{LINK_SECONDS // 60} minutes.")
LINK_NOT_VALID = "This sign-in link is not valid, has been used, or has expired: ask for a new one on the sign-in page."


class SignUp:
    def __init__(self, portal: Portal):
        self.portal = portal
        self.accounts = Accounts(portal.queue.database)
        self.key = session_key(portal.site.layout.home).encode()

    def routes(self) -> list[Route]:
        return [Route("/signup", self.form), Route("/signup", self.sign_up, methods=["POST"]),
                Route("/signin/mail", self.mail_link, methods=["POST"]),
                Route("/signin/link", self.link_form), Route("/signin/link", self.link, methods=["POST"])]

    def _portal_url(self) -> str:
        notify = self.portal.site.notify
        if notify.portal_url is None or notify.smtp is None:
            log.warning("a person asked for mail from the portal: site.toml needs [notify] portal_url and "
                        "[notify.smtp] for sign-ups and sign-in links")
            raise HTTPException(503, "The judge cannot send mail yet, so accounts are the organisers' to make: ask "
                                     "them for one.")
        return notify.portal_url

    def _open(self) -> None:
        if not self.portal.site.portal.signs_up:
            raise HTTPException(404, "Sign-up is closed on this judge: the organisers make the accounts, so ask them "
                                     "for one.")

    def form(self, request: Request) -> Response:
        self._open()
        return self.portal.page(request, "signup.html", approve=self.portal.site.portal.registration == "approve")

    async def sign_up(self, request: Request) -> Response:
        self._open()
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))
        name, email = (str(form.get(k) or "").strip() for k in ("name", "email"))
        email = email.lower()  # one mailbox however written: the account keeps it so, and the link signs it so
        portal_url = self._portal_url()
        until = int(time.time()) + confirm.VALID_SECONDS
        try:
            done = self.accounts.sign_up(
                name, email, confirm.signup_mail(portal_url, email, confirm_link.token(self.key, name, email), until),
                confirm.signin_mail(portal_url, self._signin_token_for(email), LINK_SECONDS // 60),
                self.portal.site.portal.signups_per_hour)
        except TooSoon as exc:
            return self.portal.page(request, "signup.html", status=429, error=str(exc), name=name, email=email,
                                    approve=self.portal.site.portal.registration == "approve")
        except OwnerError as exc:
            return self.portal.page(request, "signup.html", status=400, error=str(exc), name=name, email=email,
                                    approve=self.portal.site.portal.registration == "approve")
        log.info("sign-up %r: %s", name, done.mailed or "no mail now (limits)")
        return self.portal.page(request, "signup_sent.html", email=email)

    def _signin_token_for(self, email: str) -> str:
        """The sign-in link's token for the account that holds `email`, if one does (else unused)."""
        holder = self.accounts.holder(email)
        return confirm_link.signin_token(self.key, holder) if holder is not None else ""

    async def mail_link(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))
        email = str(form.get("email") or "").strip()
        portal_url = self._portal_url()
        token = self._signin_token_for(email)
        if token:
            self.accounts.ask_link(email, confirm.signin_mail(portal_url, token, LINK_SECONDS // 60))
        return self.portal.page(request, "signin.html", sent=LINK_SENT,
                                signs_up=self.portal.site.portal.signs_up)

    # the link: like the confirmation's, no session read until its button is pressed

    def _owner_of(self, token: object) -> tuple[str, float] | None:
        return confirm_link.signin_check(self.key, token, LINK_SECONDS) if isinstance(token, str) else None

    def link_form(self, request: Request) -> Response:
        token = request.query_params.get("token", "")
        found = self._owner_of(token)
        if found is None:
            return self.portal.page(request, "signin_link.html", status=400, error=LINK_NOT_VALID)
        # Whose account it is, said before the button: a link someone else sent would sign in as them.
        return self.portal.page(request, "signin_link.html", token=token, name=found[0])

    async def link(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))  # this browser's own page: no one signs it in from afar
        found = self._owner_of(form.get("token"))
        owner = self.portal.owners.get(found[0]) if found is not None else None
        if found is None or owner is None or not self.accounts.use_link(owner, found[1]):
            return self.portal.page(request, "signin_link.html", status=400, error=LINK_NOT_VALID)
        self.portal.sign_in(request, owner)
        return RedirectResponse("/entries", status_code=303)
