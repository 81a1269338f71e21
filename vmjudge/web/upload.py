"""An uploaded entry: the multipart body streamed to a temporary file beside the spool, capped
as it streams, then admitted by the same code as `vmjudge submit` (queue/admit.py), so the
portal refuses what `submit` refuses, with the same sentences, and stores nothing it refuses.

The archive keeps the name the participant gave it (admit reads the kind from it, and the
report quotes it) in a private temporary directory of its own; a name with a directory in it
is refused, never followed. The archive part is capped at the chosen challenge's size once
the challenge field has been read (browsers and curl send fields in order), at the largest
any challenge accepts before that; the whole body is capped by security.BodyLimit.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request

from .. import private
from ..config import load_challenge
from ..queue.admit import Admitted, admit, check_names
from ..queue.owners import Owner
from .portal import Portal

FIELD_LIMIT = 4096  # bytes of any field but the archive


@dataclass
class Upload:
    """The fields of an upload form and where its archive was written."""

    directory: Path
    fields: dict[str, str] = field(default_factory=dict)
    archive: Path | None = None
    archive_bytes: int = 0

    def text(self, name: str) -> str | None:
        return self.fields.get(name)

    @property
    def late(self) -> bool:
        return self.fields.get("late", "").lower() in ("1", "on", "true", "yes")


class _Parts:
    """The multipart parser's callbacks: headers of each part, fields kept in memory (small),
    the archive written to its file as it arrives and counted against `cap(upload)`."""

    def __init__(self, portal: Portal, upload: Upload):
        self.portal, self.upload = portal, upload
        self.header_name, self.header_value = b"", b""
        self.headers: dict[bytes, bytes] = {}
        self.name: str | None = None
        self.value = bytearray()
        self.file: BinaryIO | None = None
        self.caps: dict[str, int] = {}

    def callbacks(self) -> dict[str, object]:
        return {"on_part_begin": self.part_begin, "on_header_field": self.header_field,
                "on_header_value": self.header_val, "on_header_end": self.header_end,
                "on_headers_finished": self.headers_done, "on_part_data": self.data, "on_part_end": self.part_end}

    def part_begin(self) -> None:
        self.headers, self.name, self.value, self.file = {}, None, bytearray(), None

    def header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def header_val(self, data: bytes, start: int, end: int) -> None:
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
            raise HTTPException(400, f"The archive name {filename!r} is not allowed: give the file's own name, "
                                     "such as alice-entry.zip, with no directory.")
        if self.upload.archive is not None:
            raise HTTPException(400, "The form holds more than one archive: send one entry at a time.")
        check_names("portal", filename)
        self.upload.archive = self.upload.directory / filename
        self.file = private.create(self.upload.archive)

    def data(self, data: bytes, start: int, end: int) -> None:
        if self.file is None:
            self.value += data[start:end]
            if len(self.value) > FIELD_LIMIT:
                raise HTTPException(413, f"The form's field {self.name!r} is over {FIELD_LIMIT} bytes: send less.")
            return
        self.upload.archive_bytes += end - start
        cap = self.cap()
        if self.upload.archive_bytes > cap:
            name = self.upload.fields.get("challenge", "any challenge")
            raise HTTPException(413, f"{self.upload.archive.name if self.upload.archive else 'The archive'} is "
                                     f"over the {cap:,} bytes that {name} accepts: make the entry smaller and "
                                     "submit again.")
        self.file.write(data[start:end])

    def part_end(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        elif self.name:
            self.upload.fields[self.name] = self.value.decode("utf-8", "replace")

    def cap(self) -> int:
        challenge = self.upload.fields.get("challenge")
        if challenge is None:
            return self.portal.upload_cap()
        if challenge not in self.caps:
            self.caps[challenge] = load_challenge(self.portal.challenge_dir(challenge)).entry.max_size
        return self.caps[challenge]

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


async def receive_upload(portal: Portal, request: Request) -> Upload:
    """The form's fields and its archive, streamed to a fresh private directory beside the
    spool. The caller removes `upload.directory` (discard) whatever happens next."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise HTTPException(400, "An entry is sent as multipart/form-data with the fields challenge and archive "
                                 "(and late): send it so.")
    uploads = private.make_dir(portal.site.layout.home / "uploads")
    upload = Upload(Path(tempfile.mkdtemp(prefix="upload-", dir=uploads)))
    parts = _Parts(portal, upload)
    try:
        parser = MultipartParser(boundary, parts.callbacks())  # type: ignore[arg-type]
        async for chunk in request.stream():
            if chunk:
                await run_in_threadpool(parser.write, chunk)
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


def discard(upload: Upload) -> None:
    shutil.rmtree(upload.directory, ignore_errors=True)


def admit_upload(portal: Portal, owner: Owner, upload: Upload) -> Admitted:
    """Admit the uploaded archive as `vmjudge submit NAME ARCHIVE --owner OWNER [--late]` does."""
    challenge = upload.text("challenge")
    if not challenge:
        raise HTTPException(400, "The form names no challenge: choose one and submit again.")
    if upload.archive is None:
        raise HTTPException(400, "The form holds no archive: choose your entry's file and submit again.")
    directory = portal.challenge_dir(challenge)
    # An EntryError is the participant's (failures.py gives its sentence and status); any other
    # VmjudgeError is the judge's (the spool's disk full, the queue unreachable): 503 and the log.
    return admit(portal.site, portal.queue, challenge, load_challenge(directory), upload.archive, owner.name,
                 upload.late, rate_limited=True)
