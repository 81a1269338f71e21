"""Stage 3's results, kept content-addressed under HOME/archive/sha256/<hash>.

Stage 4 reads them from here, both in the daemon and in `vmjudge rescore`, so a score can be
computed again at any time without a VM, and the hash recorded with a score names exactly
the bytes it was computed from. A blob is written once (temp file, fsync, rename, fsync of
the directory) and never changed; reading it checks its hash, so a damaged file is refused
rather than scored.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Mapping

from . import private
from .errors import ArchiveError
from .stages.score.base import ExamResults

FORMAT = 1  # the layout of the JSON below; bump if it changes, and keep reading the old ones


def store_dir(home: Path) -> Path:
    return Path(home) / "archive" / "sha256"


def encode(records: tuple[str, ...] | list[str], statuses: Mapping[str, str], style: str,
           answers: Mapping[str, str | None] | None = None,
           files: Mapping[str, bytes | None] | None = None) -> bytes:
    """Canonical bytes (sorted keys, no spaces) of one entry's stage-3 results: the same
    results always give the same hash. `answers` for style answer-lines, `files` for files."""
    doc: dict[str, object] = {"format": FORMAT, "records": list(records), "statuses": dict(statuses), "style": style}
    if style == "files":
        doc["files"] = {r: (base64.b64encode(v).decode() if v is not None else None)
                        for r, v in (files or {}).items()}
    else:
        doc["answers"] = dict(answers or {})
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes) -> ExamResults:
    """ExamResults from encode()'s bytes (or from the exam-results.json of an older home)."""
    doc = json.loads(data)
    records = tuple(doc["records"])
    if doc["style"] == "files":
        return ExamResults(records=records, files={r: (base64.b64decode(v) if v is not None else None)
                                                   for r, v in doc["files"].items()})
    return ExamResults(records=records, answers=dict(doc["answers"]))


def put(home: Path, data: bytes) -> str:
    """Store `data` durably under its sha256 (a no-op when already there); return the hash."""
    digest = hashlib.sha256(data).hexdigest()
    directory = store_dir(home)
    path = directory / digest
    if path.exists():
        return digest
    for d in (directory.parent, directory):  # the results are channels to the labels: 0700, files 0600
        private.make_dir(d)
    tmp = directory / f".{digest}.{os.getpid()}.tmp"
    with private.create(tmp) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return digest


def get(home: Path, digest: str) -> bytes:
    path = store_dir(home) / digest
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ArchiveError(f"the archived results {digest[:12]} are missing from {path.parent}: "
                           "restore the archive from a backup, or run the entry again with --rerun-stages.")
    if hashlib.sha256(data).hexdigest() != digest:
        raise ArchiveError(f"the archived results {path} are damaged (their sha256 no longer matches): "
                           "restore the file from a backup, or run the entry again with --rerun-stages.")
    return data


def load(home: Path, digest: str) -> ExamResults:
    try:
        return decode(get(home, digest))
    except (ValueError, KeyError, TypeError) as exc:
        raise ArchiveError(f"the archived results {digest[:12]} cannot be read ({type(exc).__name__}: {exc}): "
                           "run the entry again with --rerun-stages.") from exc
