"""The owner's settings page (`/settings`): the address the owner hears of its entries at
(issue 35), set or cleared by the owner. Opt-in: an owner the organisers added without an
address gets no email until it gives one here.

An address set here is kept unconfirmed and sent nothing but one mail with a link (issue 54,
notify/confirm.py): the judge's mail server would otherwise send the organisers' mail to any
address a participant typed. The link is `[notify] portal_url`/settings/confirm?token=...,
signed with the portal's own key (secret.py); without portal_url (or [notify.smtp]) no link can
be sent, so no address is taken, the participant is told so in one sentence and the organiser's
log says what to set. The page says whether the address is confirmed, and sends the link again
on request, within the limits queue/owners.py sets per owner.

Following the link needs no sign-in: the token binds the owner and the address, and the reader
of the mailbox need not be the participant (a team's address). Opening it changes nothing (mail
scanners open links); its page's button, a POST of the token, confirms. That page neither reads
nor writes the session, so the link opened in a browser where the participant is signed in
(whose cookie, SameSite=Strict, a link from a mail does not carry) does not sign them out.

The page shows only the signed-in owner's own address; a bad one is refused in the sentence
queue/owners.py gives, and the forms are CSRF-checked like every other.
"""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..notify import confirm
from ..queue.accounts import Accounts
from ..queue.outbox import last_confirmation
from ..queue.owners import Owner, OwnerError, TooSoon, checked_email
from ..queue.rows import stamp
from . import confirm_link
from .portal import Portal
from .secret import session_key

log = logging.getLogger(__name__)
TAKEN = ("This address belongs to an account already: sign in with it (\"Mail me a link\" on the sign-in page) "
         "rather than making another.")
NOT_NOW = "The judge cannot confirm addresses yet, so none can be set here: ask the organisers."


class Settings:
    def __init__(self, portal: Portal):
        self.portal = portal
        self.key = session_key(portal.site.layout.home)

    def routes(self) -> list[Route]:
        return [Route("/settings", self.form), Route("/settings", self.save, methods=["POST"]),
                Route("/settings/resend", self.resend, methods=["POST"]),
                Route("/settings/token", self.new_token, methods=["POST"]),
                Route("/settings/confirm", self.confirm_form),
                Route("/settings/confirm", self.confirm, methods=["POST"])]

    def _page(self, request: Request, owner: Owner, status: int = 200, **values: object) -> Response:
        sent = last_confirmation(self.portal.queue.database, owner.name, owner.email) if owner.email else None
        values = {"email": owner.email or "", "confirmed": owner.confirmed_email is not None,
                  "sent_at": stamp(sent.created) if sent is not None else None, **values}
        return self.portal.page(request, "settings.html", status=status, **values)

    def form(self, request: Request) -> Response:
        owner = self.portal.participant(request)
        return self._page(request, owner, saved=request.query_params.get("saved") == "1")

    def _can_send(self, who: str) -> bool:
        """Whether a confirmation can be sent; if not, the organiser's log says what to set."""
        notify = self.portal.site.notify
        missing = [what for what, unset in (
            ("[notify] portal_url, the portal's address as participants reach it (such as "
             "\"https://judge.example.org\"), which the confirmation mail links to", notify.portal_url is None),
            ("a [notify.smtp] table, the server the judge's email goes through", notify.smtp is None)) if unset]
        if missing:
            log.warning("%s could not set an address on /settings: site.toml needs %s.", who, " and ".join(missing))
        return not missing

    def _ask(self, request: Request, owner: Owner, email: str) -> Response:
        """Set `email` unconfirmed and mail its link, or the page saying why not."""
        try:
            checked_email(email)
        except OwnerError as exc:
            return self._page(request, owner, status=400, email=email, error=str(exc))
        portal_url = self.portal.site.notify.portal_url
        if not self._can_send(owner.name) or portal_url is None:
            return self._page(request, owner, status=400, email=email, error=NOT_NOW)
        try:
            until = int(time.time()) + confirm.VALID_SECONDS
            link = confirm_link.token(self.key.encode(), owner.name, email)
            sent = self.portal.owners.ask_email(owner.name, email, confirm.mail(portal_url, email, link, until))
        except TooSoon as exc:
            return self._page(request, owner, status=429, error=str(exc))
        except OwnerError as exc:
            return self._page(request, owner, status=400, email=email, error=str(exc))
        return RedirectResponse("/settings" if sent else "/settings?saved=1", status_code=303)

    async def save(self, request: Request) -> Response:
        owner = self.portal.participant(request)
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))
        given = form.get("email")
        email = given.strip() if isinstance(given, str) else ""
        if not email or email == owner.confirmed_email:  # no address, or the same: nothing to confirm
            if not email:
                self.portal.owners.set_email(owner.name, None)
            return RedirectResponse("/settings?saved=1", status_code=303)
        return self._ask(request, owner, email)

    async def resend(self, request: Request) -> Response:
        owner = self.portal.participant(request)
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))
        if not owner.email or owner.confirmed_email is not None:
            return RedirectResponse("/settings", status_code=303)
        return self._ask(request, owner, owner.email)

    async def new_token(self, request: Request) -> Response:
        """A new token for the API (an account made on the portal has none it was shown): shown on this
        answer only. The old token and every other session stop; this one is signed in again."""
        owner = self.portal.participant(request)
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))
        token = self.portal.owners.new_token(owner.name)
        renewed = self.portal.owners.get(owner.name)
        assert renewed is not None
        self.portal.sign_in(request, renewed)
        response = self._page(request, renewed, token=token)
        response.headers["Cache-Control"] = "no-store"
        return response

    # the link: no session read or written (above)

    def _checked(self, token: object) -> tuple[Owner | None, str | None]:
        """The owner whose address the token confirms, or the sentence refusing it. The same
        sentence whether the owner named exists or not: a forged token learns nothing."""
        name = confirm_link.named_owner(token) if isinstance(token, str) else None
        owner = self.portal.owners.get(name) if name is not None else None
        if not isinstance(token, str) or owner is None or not owner.active or not owner.email:
            return None, confirm.NOT_VALID
        return owner, confirm_link.check(self.key.encode(), token, owner.email)

    def _link_page(self, request: Request, status: int, **values: object) -> Response:
        html = self.portal.pages.get_template("confirm.html").render(me=None, csrf="", path=request.url.path,
                                                                     **values)
        return Response(html, status_code=status, media_type="text/html; charset=utf-8")

    def confirm_form(self, request: Request) -> Response:
        token = request.query_params.get("token", "")
        owner, refused = self._checked(token)
        if owner is None or refused is not None:
            return self._link_page(request, 400, error=refused or confirm.NOT_VALID)
        return self._link_page(request, 200, email=owner.email, token=token,
                               done=owner.confirmed_email is not None, signed_up=owner.awaiting is not None,
                               waiting=owner.awaiting if owner.confirmed_email is not None else None)

    async def confirm(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=4)
        owner, refused = self._checked(form.get("token"))
        if owner is None or refused is not None or owner.email is None:
            return self._link_page(request, 400, error=refused or confirm.NOT_VALID)
        accounts = Accounts(self.portal.queue.database)
        if owner.awaiting is not None and accounts.holder(owner.email) not in (None, owner.name):
            return self._link_page(request, 400, error=TAKEN)  # one account per mailbox
        if not self.portal.owners.confirm(owner.name, owner.email):  # changed between the check and now
            return self._link_page(request, 400, error=confirm.NOT_VALID)
        if owner.awaiting is None:
            log.info("%s confirmed the address it set on /settings", owner.name)
            return self._link_page(request, 200, email=owner.email, done=True)
        waiting = accounts.confirmed(owner.name, self.portal.site.portal.registration)
        log.info("sign-up %s confirmed its address%s", owner.name, f"; waiting for {waiting}" if waiting else "")
        return self._link_page(request, 200, email=owner.email, done=True, signed_up=True, waiting=waiting)
