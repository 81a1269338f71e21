"""The teams page (issue 58): a participant's teams, one per challenge, each with its members and its
invitation link; making a team where the challenge's [portal] team_size allows them; joining by a
link. The rules are queue/teams.py's; a team's entries, limits and board row are an owner's.

An invitation link signs the challenge, the team and the team's current nonce with the portal's key
(itsdangerous, as the session cookie and the mailed links are), so it cannot be made for a team by
anyone else, and `vmjudge team invite` stops the links given out before. Following one needs the
person signed in: a link's page changes nothing, its button (CSRF-checked) joins.
"""

from __future__ import annotations

from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..config import load_challenge
from ..errors import VmjudgeError
from ..queue.owners import OwnerError
from ..queue.teams import Team, Teams, no_teams
from .portal import Portal
from .secret import session_key

SALT = "vmjudge team invitation"
MAX_TOKEN = 512
NOT_VALID = "This invitation is not valid or has expired: ask the team for its current link."
INVITE_SECONDS = 30 * 24 * 3600  # an invitation link's life; the Teams page shows a new one each time


class TeamPages:
    def __init__(self, portal: Portal):
        self.portal = portal
        self.teams = Teams(portal.queue.database)
        self.signer = URLSafeTimedSerializer(session_key(portal.site.layout.home).encode(), salt=SALT)

    def routes(self) -> list[Route]:
        return [Route("/teams", self.page), Route("/teams", self.create, methods=["POST"]),
                Route("/teams/join", self.join_form), Route("/teams/join", self.join, methods=["POST"])]

    def invitation(self, team: Team) -> str:
        return f"/teams/join?token={self.signer.dumps([team.challenge, team.name, team.invite])}"

    def _sizes(self) -> dict[str, int]:
        """Each challenge that takes teams, and the most members one may have."""
        sizes = {}
        for name in self.portal.challenge_names():
            try:
                size = load_challenge(self.portal.queue.challenge_dir(name)).portal.team_size
            except VmjudgeError:
                continue
            if size:
                sizes[name] = size
        return sizes

    def _page(self, request: Request, status: int = 200, **values: Any) -> Response:
        me = self.portal.participant(request)
        mine = self.teams.of_person(me.name)
        taken = {t.challenge for t in mine}
        return self.portal.page(request, "teams.html", status=status,
                                teams=[(t, self.invitation(t)) for t in mine],
                                open=[c for c in self._sizes() if c not in taken], **values)

    def page(self, request: Request) -> Response:
        return self._page(request)

    async def create(self, request: Request) -> Response:
        me = self.portal.participant(request)
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))
        challenge, name = (str(form.get(k) or "").strip() for k in ("challenge", "name"))
        try:
            if challenge not in self._sizes():
                raise no_teams(challenge[:64])
            self.teams.create(challenge, name, me.name)
        except OwnerError as exc:  # a TeamError, or a name not allowed
            return self._page(request, status=400, error=str(exc))
        return RedirectResponse("/teams", status_code=303)

    def _invited(self, token: object) -> tuple[str, str, str]:
        try:
            if not isinstance(token, str) or len(token) > MAX_TOKEN:
                raise BadSignature("no token")
            challenge, name, invite = self.signer.loads(token, max_age=INVITE_SECONDS)
        except (BadSignature, ValueError, TypeError):
            raise HTTPException(400, NOT_VALID) from None
        return str(challenge), str(name), str(invite)

    def join_form(self, request: Request) -> Response:
        self.portal.participant(request)
        token = request.query_params.get("token", "")
        challenge, name, _ = self._invited(token)
        return self.portal.page(request, "team_join.html", challenge=challenge, team=name, token=token)

    async def join(self, request: Request) -> Response:
        me = self.portal.participant(request)
        form = await request.form(max_files=0, max_fields=4)
        self.portal.check_csrf(request, form.get("csrf"))
        challenge, name, invite = self._invited(form.get("token"))
        size = self._sizes().get(challenge)
        try:
            if size is None:
                raise no_teams(challenge)
            self.teams.join(challenge, name, me.name, size, invite)
        except OwnerError as exc:
            return self.portal.page(request, "team_join.html", status=400, error=str(exc), challenge=challenge,
                                    team=name, token="")
        return RedirectResponse("/teams", status_code=303)
