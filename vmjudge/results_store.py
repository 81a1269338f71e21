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
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Optional, Union

from . import private
from .config.layout import Layout
from .errors import ArchiveError
from .stages.score.base import ExamResults

FORMAT = 1  # the layout of the JSON below; bump if it changes, and keep reading the old ones


def store_dir(home: Path) -> Path:
    return Layout(Path(home)).results_store


FileSource = Union[bytes, None, Callable[[], Optional[bytes]]]


def encode(records: tuple[str, ...] | list[str], statuses: Mapping[str, str], style: str,
           answers: Mapping[str, str | None] | None = None,
           files: Mapping[str, FileSource] | None = None) -> bytes:
    """Canonical bytes (sorted keys, no spaces) of one entry's stage-3 results: the same
    results always give the same hash. `answers` for style answer-lines, `files` for files."""
    return b"".join(encode_chunks(records, statuses, style, answers, files))


def encode_chunks(records: tuple[str, ...] | list[str], statuses: Mapping[str, str], style: str,
                  answers: Mapping[str, str | None] | None = None,
                  files: Mapping[str, FileSource] | None = None) -> Iterator[bytes]:
    """encode()'s bytes in pieces, one result file at a time: a file given as a callable is
    read only when its turn comes, so an exam's files never need to be in memory together.
    The pieces are what json.dumps(doc, sort_keys=True, separators=(",", ":")) would write."""
    def dumps(obj: object) -> bytes:
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()

    yield b"{"
    if style == "files":
        yield b'"files":{'
        for i, record in enumerate(sorted(files or {})):
            source = (files or {})[record]
            data = source() if callable(source) else source
            yield (b"," if i else b"") + dumps(record) + b":" + \
                (dumps(base64.b64encode(data).decode()) if data is not None else b"null")
        yield b"},"
    else:
        yield b'"answers":' + dumps(dict(answers or {})) + b","
    yield dumps({"format": FORMAT, "records": list(records), "statuses": dict(statuses), "style": style})[1:]


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
    return put_chunks(home, [data])


def put_chunks(home: Path, chunks: Iterable[bytes]) -> str:
    """Store the concatenated chunks durably under their sha256, hashing as they are written
    (temp file, fsync, rename, fsync of the directory); return the hash."""
    directory = store_dir(home)
    for d in (directory.parent, directory):  # the results are channels to the labels: 0700, files 0600
        private.make_dir(d)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=".put.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                digest.update(chunk)
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        path = directory / digest.hexdigest()
        if path.exists():
            return digest.hexdigest()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return digest.hexdigest()


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
