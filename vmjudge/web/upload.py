"""An uploaded entry: the owner's turn taken (gate.py), the multipart body streamed to a temporary
file beside the spool, capped as it streams, then admitted by the same code as `vmjudge submit`
(queue/admit.py), so the portal refuses what `submit` refuses, with the same sentences, and
stores nothing it refuses.

What costs the judge is paid for by the owner before it is spent: the form must name its
challenge before its archive (browsers and curl send fields in the order given), and the
owner's limits on that challenge (and, in a contest, the phase it goes to: its window, whether
it takes uploads) are checked, and the page form's CSRF token too, before the archive's first
byte is written; the archive is capped as it streams at the smaller of the
challenge's max_size and the spool room the owner has left. The form may hold a few small
fields only (MAX_PARTS, FIELD_LIMIT, HEADER_LIMIT), so a body of thousands of fields is refused
at the ninth, not held in memory. The body is parsed on the portal's upload threads
(Portal.upload_io) and the archive checked in a worker process (checks.py), never on the threads
pages are served from; the admission lock is held only for placing and queueing.

The archive keeps the name the participant gave it (admit reads the kind from it, and the
report quotes it) in a private temporary directory of its own; a name with a directory in it
is refused, never followed. The directory is removed whatever happens, a client that stalls or
goes away included. Every upload that is refused or fails, for the owner's reasons, counts
toward the owner's failed uploads (gate.py); the judge's own failures do not.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import anyio
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.exceptions import HTTPException
from starlette.requests import Request

from .. import private
from ..config import Challenge, Phase, load_challenge
from ..errors import EntryError, VmjudgeError
from ..queue.admit import Admitted, check_names, enter, owner_limits, spool_room
from ..queue.owners import Owner
from ..queue.phase_rules import entrant_refusal, upload_phase, upload_refusal
from ..queue.rows import Usage
from ..queue.spool import STALE
from ..queue.teams import Teams
from .failures import entry_status
from .portal import Portal

FIELD_LIMIT = 4096  # bytes of any field but the archive
HEADER_LIMIT = 8192  # bytes of one part's headers
MAX_PARTS = 8  # the form has five: csrf, challenge, phase, archive, late


@dataclass
class Upload:
    """The fields of an upload form, where its archive was written, and the challenge it names."""

    directory: Path
    fields: dict[str, str] = field(default_factory=dict)
    archive: Path | None = None
    archive_bytes: int = 0
    challenge: Challenge | None = None
    phase: Phase | None = None  # a contest's phase the entry goes to, chosen before its archive is stored
    entrant: str | None = None  # who it is submitted as: the uploader's team in its challenge, or the uploader

    def text(self, name: str) -> str | None:
        return self.fields.get(name)

    @property
    def late(self) -> bool:
        return self.fields.get("late", "").lower() in ("1", "on", "true", "yes")

    @property
    def smoke(self) -> bool:
        """A smoke test: a dry run asked for at upload (the form's smoke field)."""
        return self.fields.get("smoke", "").lower() in ("1", "on", "true", "yes")


class _Parts:
    """The multipart parser's callbacks: headers of each part, fields kept in memory (small and
    few), the archive written to its file as it arrives, once the owner's limits allow it."""

    def __init__(self, portal: Portal, owner: Owner, upload: Upload, before_archive: Callable[[Upload], None]):
        self.portal, self.owner, self.upload, self.before_archive = portal, owner, upload, before_archive
        self.header_name, self.header_value = b"", b""
        self.header_bytes = 0
        self.parts = 0
        self.headers: dict[bytes, bytes] = {}
        self.name: str | None = None
        self.value = bytearray()
        self.file: BinaryIO | None = None
        self.used: Usage | None = None

    def callbacks(self) -> dict[str, object]:
        return {"on_part_begin": self.part_begin, "on_header_field": self.header_field,
                "on_header_value": self.header_val, "on_header_end": self.header_end,
                "on_headers_finished": self.headers_done, "on_part_data": self.data, "on_part_end": self.part_end}

    def part_begin(self) -> None:
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise HTTPException(400, f"The form holds more than {MAX_PARTS} fields: send only challenge, archive "
                                     "and late (and the page's csrf).")
        self.headers, self.name, self.value, self.file, self.header_bytes = {}, None, bytearray(), None, 0

    def _count_header(self, n: int) -> None:
        self.header_bytes += n
        if self.header_bytes > HEADER_LIMIT:
            raise HTTPException(400, f"A part of the form has over {HEADER_LIMIT} bytes of headers: send the form "
                                     "as a browser or curl sends it.")

    def header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self.header_name += data[start:end]

    def header_val(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self.header_value += data[start:end]

    def header_end(self) -> None:
        self.headers[self.header_name.lower()] = self.header_value
        self.header_name, self.header_value = b"", b""

    def headers_done(self) -> None:
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        self.name = options.get(b"name", b"").decode("utf-8", "replace")
        if self.name != "archive":
            return
        filename = options.get(b"filename", b"").decode("utf-8", "replace")
        if not filename or "/" in filename or "\\" in filename or filename in (".", ".."):
            raise HTTPException(400, f"The archive name {filename[:80]!r} is not allowed: give the file's own name, "
                                     "such as alice-entry.zip, with no directory.")
        if self.upload.archive is not None:
            raise HTTPException(400, "The form holds more than one archive: send one entry at a time.")
        check_names("portal", filename)
        self.archive_begins()
        self.upload.archive = self.upload.directory / filename
        self.file = private.create(self.upload.archive)

    def archive_begins(self) -> None:
        """Before the archive's first byte is written: the form's own check (CSRF), then the
        challenge it names and the owner's limits on it, read from the queue."""
        self.before_archive(self.upload)
        name = self.upload.text("challenge")
        if not name:
            raise HTTPException(400, "The form names no challenge before its archive: send the challenge field "
                                     "first, then the archive.")
        ch = self.upload.challenge = load_challenge(self.portal.challenge_dir(name))
        phase = self.upload.phase = upload_phase(ch, name, self.upload.text("phase") or None, self.upload.late,
                                                 time.time())
        if phase is not None:  # a phase's window and uploads, before a byte is stored
            upload_refusal(ch, name, phase, self.upload.late, time.time())
        entrant = self.upload.entrant = Teams(self.portal.queue.database).entrant(name, self.owner.name)
        self.used = self.portal.queue.owner_usage(name, entrant, self.upload.late,
                                                  phase.name if phase is not None else None)
        if phase is not None:  # promotion and the phase's limits per owner, before a byte is stored
            entrant_refusal(ch, name, phase, entrant, self.upload.late, self.used)
        owner_limits(ch.in_phase(phase.name if phase is not None else None), name, entrant, self.used)

    def data(self, data: bytes, start: int, end: int) -> None:
        if self.file is None:
            self.value += data[start:end]
            if len(self.value) > FIELD_LIMIT:
                raise HTTPException(413, f"The form's field {self.name!r} is over {FIELD_LIMIT} bytes: send less.")
            return
        self.upload.archive_bytes += end - start
        ch, used = self.upload.challenge, self.used
        assert ch is not None and used is not None and self.upload.archive is not None
        if self.upload.archive_bytes > ch.entry.max_size:
            raise HTTPException(413, f"{self.upload.archive.name} is over the {ch.entry.max_size:,} bytes that "
                                     f"{self.upload.text('challenge')} accepts: make the entry smaller and submit "
                                     "again.")
        if self.upload.archive_bytes > spool_room(ch, used):
            owner_limits(ch, str(self.upload.text("challenge")), self.upload.entrant or self.owner.name, used,
                         self.upload.archive_bytes)
        self.file.write(data[start:end])

    def part_end(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        elif self.name:
            self.upload.fields[self.name] = self.value.decode("utf-8", "replace")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


async def receive_upload(portal: Portal, request: Request, owner: Owner,
                         before_archive: Callable[[Upload], None]) -> Upload:
    """The form's fields and its archive, streamed to a fresh private directory beside the
    spool. The caller removes `upload.directory` (discard) whatever happens next."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise HTTPException(400, "An entry is sent as multipart/form-data with the fields challenge and archive "
                                 "(and late): send it so.")
    uploads = private.make_dir(portal.site.layout.home / "uploads")
    sweep(uploads)
    upload = Upload(Path(tempfile.mkdtemp(prefix="upload-", dir=uploads)))
    parts = _Parts(portal, owner, upload, before_archive)
    try:
        parser = MultipartParser(boundary, parts.callbacks())  # type: ignore[arg-type]
        async for chunk in request.stream():
            if chunk:
                await anyio.to_thread.run_sync(parser.write, chunk, limiter=portal.upload_io)
        parser.finalize()
    except MultipartParseError as exc:
        parts.close()
        discard(upload)
        raise HTTPException(400, f"The form could not be read ({exc}): send it again as multipart/form-data.") from exc
    except BaseException:
        parts.close()
        discard(upload)
        raise
    parts.close()
    return upload


def sweep(uploads: Path) -> None:
    """Remove what a crashed portal left in HOME/uploads: an upload directory in which nothing
    was written for STALE seconds (a live upload writes at least every [web] body_timeout)."""
    old = time.time() - STALE
    for directory in uploads.glob("upload-*"):
        try:
            if max(p.stat().st_mtime for p in (directory, *directory.iterdir())) < old:
                shutil.rmtree(directory, ignore_errors=True)
        except FileNotFoundError:
            continue  # its own upload removed it as we looked


def discard(upload: Upload) -> None:
    shutil.rmtree(upload.directory, ignore_errors=True)


async def admit_upload(portal: Portal, owner: Owner, upload: Upload) -> Admitted:
    """Admit the uploaded archive as `vmjudge submit NAME ARCHIVE --owner OWNER [--late]` does:
    staged and checked in a worker process (checks.py), then placed and queued on a thread."""
    challenge, ch = upload.text("challenge"), upload.challenge
    if upload.archive is None or ch is None or not challenge:
        raise HTTPException(400, "The form holds no archive: choose your entry's file and submit again.")
    # An EntryError is the participant's (failures.py gives its sentence and status); any other
    # VmjudgeError is the judge's (the spool's disk full, the queue unreachable): 503 and the log.
    entrant = upload.entrant or owner.name  # a member of a team submits as the team
    prepared = await portal.checker.prepare(portal.site, challenge, ch, upload.archive, entrant)
    return await anyio.to_thread.run_sync(lambda: enter(portal.site, portal.queue, challenge, ch, prepared,
                                                        entrant, upload.late, rate_limited=True, person=owner.name,
                                                        phase=upload.phase, smoke=upload.smoke),
                                          limiter=portal.upload_io)


def _owners_fault(exc: BaseException) -> int | None:
    """The status of an upload that failed for the owner's reasons, None for the judge's own, and
    None for a form without its CSRF token (403): another site's forged form must not use up the
    owner's failed uploads."""
    if isinstance(exc, HTTPException):
        return exc.status_code if exc.status_code < 500 and exc.status_code != 403 else None
    if isinstance(exc, EntryError):
        return entry_status(exc)
    if isinstance(exc, VmjudgeError):
        return None
    return 400  # a body that stalled or broke off, one too large: the client's doing


async def upload_entry(portal: Portal, request: Request, owner: Owner,
                       before_archive: Callable[[Upload], None] = lambda upload: None) -> Admitted:
    """Take the owner's turn, receive the upload, admit it; count it among the owner's failed
    uploads if it is refused or fails for the owner's reasons."""
    with portal.gate.turn(owner.name):
        await anyio.to_thread.run_sync(portal.gate.check_failures, owner.name, limiter=portal.upload_io)
        try:
            upload = await receive_upload(portal, request, owner, before_archive)
            try:
                return await admit_upload(portal, owner, upload)
            finally:
                discard(upload)
        except Exception as exc:
            status = _owners_fault(exc)
            if status is not None:
                await anyio.to_thread.run_sync(portal.gate.failed.add, owner.name, status, limiter=portal.upload_io)
            raise
