"""The challenges' own pages (issue 58): the home page lists them, and each has a page of what a
participant reads before the first upload: the organiser's description, the runtime written by the
judge (images/runtime.py, the text of `vmjudge challenge show`), the stages' limits, the phases,
the scorer and the downloads. GET /api/challenges and /api/challenges/NAME are the same in JSON.

The pages are public, like a contest's overview anywhere; the downloads are signed-in participants'
only unless the organiser's [portal] public says otherwise, and each exists only when [portal]
turns it on. Nothing here reads a test set or a reference: a download is made from the training
set and the sample entry alone (replica/downloads.py refuses a file that leads into either).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from ..config import Challenge, load_challenge
from ..config.portal_page import DESCRIPTION_MAX, overlaps
from ..errors import VmjudgeError
from ..reasons import FAULTS
from ..reasons.page import by_fault
from ..replica.downloads import WHAT, label, made, offered
from ..reports import participant
from ..reports.challenge_view import CHALLENGE, CHALLENGE_LIST, challenge_document, challenge_row
from ..reports.phase_view import PhaseViews
from .markdown import rendered
from .portal import Portal

log = logging.getLogger(__name__)


class ChallengePages:
    def __init__(self, portal: Portal):
        self.portal = portal

    def routes(self) -> list[Route]:
        return [Route("/", self.home), Route("/reasons", self.reasons), Route("/challenges/{challenge}", self.page),
                Route("/challenges/{challenge}/download/{what}", self.download),
                Route("/api/challenges", self.list_json), Route("/api/challenges/{challenge}", self.page_json)]

    def _challenges(self) -> list[Challenge]:
        found = []
        for name in self.portal.challenge_names():
            try:
                found.append(load_challenge(self.portal.queue.challenge_dir(name)))
            except VmjudgeError:
                continue  # its copy is not on this host, or no longer loads: `vmjudge challenge add` says why
        return found

    def _challenge(self, request: Request) -> Challenge:
        name = request.path_params["challenge"]
        if name not in self.portal.challenge_names():
            raise HTTPException(404, f"There is no challenge named {name[:64]!r}.")
        try:
            ch = load_challenge(self.portal.queue.challenge_dir(name))
        except VmjudgeError:
            raise HTTPException(503, f"{name}'s files cannot be read on this host now: try again later.") from None
        phase = request.query_params.get("phase") or None
        if phase is not None and phase not in [p.name for p in ch.phases]:
            raise HTTPException(404, f"{name} has no phase {phase[:40]!r}.")
        return ch.in_phase(phase) if phase is not None else ch

    def _document(self, ch: Challenge) -> dict[str, Any]:
        doc = challenge_document(self.portal.site, ch, PhaseViews.load(self.portal.queue), participant.now(),
                                 self._downloads(ch))
        return participant.allowed(doc, CHALLENGE)

    def _downloads(self, ch: Challenge) -> dict[str, Any]:
        """What the organiser offers: each with its address, and once made its name, size and sha256
        (from its index: replica/downloads.py; a page reads no file of the set)."""
        query = f"?phase={ch.phase.name}" if ch.phase is not None else ""
        rows = []
        for what in WHAT:
            if not _offered(ch, what):
                continue
            row: dict[str, Any] = {"what": what, "url": f"/challenges/{ch.name}/download/{what}{query}"}
            got = offered(self.portal.site, ch, what)
            if got is not None:
                row |= {"name": got.name, "size": got.size, "sha256": got.sha256}
            row["making"] = self.portal.builds.running(label(ch, what))
            rows.append(row)
        phase = f" --phase {ch.phase.name}" if ch.phase is not None else ""
        return {"signed_in_only": not ch.portal.public, "files": rows,
                "replica_command": f"vmjudge replica build {ch.name}{phase} -o replica.iso"}

    def home(self, request: Request) -> Response:
        rows = [challenge_row(ch) for ch in self._challenges()]
        return self.portal.page(request, "home.html", rows=rows)

    def reasons(self, request: Request) -> Response:
        """Every reason an entry can carry (vmjudge/reasons), which a report's reason links to: the
        same for everyone, and nothing of any entry."""
        return self.portal.page(request, "reasons.html", groups=by_fault(), faults=FAULTS)

    def list_json(self, request: Request) -> Response:
        rows = [challenge_row(ch) for ch in self._challenges()]
        return JSONResponse(participant.allowed({"challenges": rows}, CHALLENGE_LIST))

    def page(self, request: Request) -> Response:
        ch = self._challenge(request)
        doc = self._document(ch)
        description = None
        path = ch.directory / ch.portal.description if ch.portal.description is not None else None
        # checked by `challenge add`, and again here (challenge.toml is read anew for each page): never a secret
        if path is not None and path.is_file() and not overlaps(path, ch.secret_dirs):
            with open(path, "rb") as f:
                description = rendered(f.read(DESCRIPTION_MAX).decode(errors="replace"))
        return self.portal.page(request, "challenge.html", doc=doc, description=description)

    def page_json(self, request: Request) -> Response:
        return JSONResponse(self._document(self._challenge(request)))

    def download(self, request: Request) -> Response:
        """The file as last made; one not made yet is made aside (a page asks to come back), and
        nothing of a phase that has not opened leaves the judge but to its organisers."""
        ch = self._challenge(request)
        what = request.path_params["what"]
        if what not in WHAT or not _offered(ch, what):
            raise HTTPException(404, f"{ch.name} offers no {what[:20]} download.")
        reader = self.portal.reader(request) if not ch.portal.public else None  # a session, or curl's token
        if ch.phase is not None and not ch.phase.has_opened(participant.now()) and \
                not (reader is not None and reader.organiser):
            raise HTTPException(404, f"{ch.name}'s phase {ch.phase.name} has not opened: its downloads come with it.")
        got = offered(self.portal.site, ch, what)
        if got is None:
            site = self.portal.site
            if not self.portal.builds.start(label(ch, what), lambda: made(site, ch, what)):
                raise HTTPException(503, f"{ch.name}'s {what} download could not be made; the organisers are told in "
                                         "the judge's log: try again later.")
            return self.portal.page(request, "making.html", status=202, doc=self._document(ch), what=what)
        return FileResponse(got.path, filename=got.name, media_type="application/octet-stream",
                            headers={"X-Content-SHA256": got.sha256})


def _offered(ch: Challenge, what: str) -> bool:
    return {"training": ch.portal.training, "sample": ch.portal.sample is not None,
            "replica": ch.portal.replica}[what]
