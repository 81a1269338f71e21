"""What the caller is told when a request fails, and what the organiser's log keeps of it.

Participants get one sentence fit for them, never the judge's insides. The queue's, the spool's
and the challenges' own errors (VmjudgeError) are written for the organiser at the judge's
terminal: they name the database file or URL, the spool's path, a challenge directory, the
command to run. None of that is a participant's to act on, and a path, a host or a URL tells
an attacker how the judge is laid out; so the caller gets 503 and a sentence saying the judge
cannot do it now, and the log gets the error itself, on one line with the request it failed.

An EntryError is the entry's or the owner's (a bad archive, a limit reached): its sentence is
the participant's, as `vmjudge submit` prints it. A client that went away is one line in the
log, not a failure of the portal; anything unforeseen is logged with its traceback and
answered with a plain 500 (LastResort).
"""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import EntryError, VmjudgeError
from .refusal import refusal
from .security import BodyTooLarge, ClientStalled

log = logging.getLogger("vmjudge.web")

UNAVAILABLE = ("The judge cannot do this just now because of a problem on its side, which its organisers have "
               "been told about: try again in a few minutes.")
# Refusals of an entry that are not the archive's fault; any other EntryError is a bad request.
STATUS = {"entry-limit": 409, "vm-budget": 409, "spool-limit": 409, "rate-limit": 429, "smoke-limit": 429,
          "pending-limit": 429,
          # a contest's phases (queue/phase_rules.py, queue/carry.py): not now, not this owner, not this entry
          "phase-window": 409, "phase-carry": 409, "phase-uploads": 409, "phase-quota": 409, "not-promoted": 409,
          "not-passed": 409, "carried-twice": 409, "not-carryable": 404,
          "team-changed": 409}  # #58: the uploader joined or left a team while the upload was on its way
# Starlette's own refusals carry a phrase, not a sentence.
SENTENCES = {404: "There is no such page: check the address.",
             405: "This page does not take that kind of request: follow the portal's own links and forms."}


def entry_status(exc: EntryError) -> int:
    return STATUS.get(exc.reason or "", 400)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    sentence = str(exc.detail)
    if sentence == HTTPException(exc.status_code).detail:  # the bare phrase ("Not Found")
        sentence = SENTENCES.get(exc.status_code, sentence)
    return refusal(request.url.path, exc.status_code, sentence, dict(exc.headers or {}))


async def too_large(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BodyTooLarge)
    return refusal(request.url.path, 413, f"The request is over the {exc.cap:,} bytes allowed here: send less.")


async def entry_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, EntryError)
    return refusal(request.url.path, entry_status(exc), str(exc))


async def judge_side(request: Request, exc: Exception) -> Response:
    """The judge's own trouble: the organiser's sentence to the log, the participant's to the caller."""
    log.error("the portal could not answer %s %s: %s", request.method, request.url.path, exc)
    return refusal(request.url.path, 503, UNAVAILABLE)


async def stalled(request: Request, exc: Exception) -> Response:
    """A body that stopped arriving: one line in the log, 408, and the connection closed (what
    the client may still send of its body is no longer read)."""
    assert isinstance(exc, ClientStalled)
    where = request.client.host if request.client else "a client"
    log.info("%s stopped sending its body to %s %s for %g s: cut off", where, request.method, request.url.path,
             exc.seconds)
    return refusal(request.url.path, 408, f"Nothing of the request arrived for {exc.seconds:g} seconds: send it "
                                          "again from a steadier connection.", {"connection": "close"})


HANDLERS = {HTTPException: http_error, BodyTooLarge: too_large, EntryError: entry_error, VmjudgeError: judge_side,
            ClientStalled: stalled}


class LastResort:
    """Anything unforeseen: logged with its traceback for the organiser, a plain 500 for the
    caller (inside SecurityHeaders, so even this page carries the headers). A client that went
    away mid-request is one line: nothing failed on the judge's side."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except ClientDisconnect:
            log.info("the client went away during %s %s", scope["method"], scope["path"])
        except Exception:
            log.exception("the portal failed on %s %s", scope["method"], scope["path"])
            if not started:
                await refusal(scope["path"], 500, "Something failed on the judge's side; it has been logged for "
                                                  "the organisers. Try again later.")(scope, receive, send)
