"""Stage 3's results, kept content-addressed under HOME/archive/sha256/<hash>, and the
queue's link from each entry to them.

Stage 4 reads them from here, both in the daemon and in `vmjudge rescore`, so a score can be
computed again at any time without a VM, and the hash recorded with a score names exactly
the bytes it was computed from. A blob is written once (temp file, fsync, rename, fsync of
the directory) and never changed; reading it checks its hash, so a damaged file is refused
rather than scored. ExamResults, what a scorer is given, is defined here, below the scorers,
so that the store imports nothing of theirs.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import private
from ..config.layout import Layout
from ..errors import ArchiveError, InfrastructureError, VmjudgeError
from ..files import DurableFile
from .db import Queue
from .rows import ArchivedResults

FORMAT = 1  # the layout of the JSON below; bump if it changes, and keep reading the old ones
# Where a home made before the results store kept them (read once, then archived).
LEGACY_RESULTS_FILE = "exam-results.json"


@dataclass(frozen=True)
class ExamResults:
    """Stage 3's results for one entry, in the test set's RECORDS order.

    answers: for style "answer-lines", the label the entry gave each record; None when the
    record failed, timed out or has no line (scored as the scorer's "missing" rule).
    files: for style "files", the bytes of the output file each record left; None when the
    record failed, timed out or left no file.
    outputs: for style "sockets" (a challenge with [[output]] sockets, Grand Challenge's way), the
    bytes each record left for each output socket, by the socket's slug (an image socket's one
    image file, a value socket's JSON); None where it failed, timed out or left none valid.
    rows: for style "table" (a submission entry's submission.csv, DrivenData's way), each id's row as
    column -> the text the entry wrote, its format checked (stages/submission_check.py); None for the
    ids of a stepped run's step that failed, timed out or was off its format.
    Exactly one of the four mappings is filled, for every record in `records`.
    """

    records: tuple[str, ...]
    answers: Mapping[str, str | None] | None = None
    files: Mapping[str, bytes | None] | None = None
    outputs: Mapping[str, Mapping[str, bytes | None]] | None = None
    rows: Mapping[str, Mapping[str, str] | None] | None = None


def store_dir(home: Path) -> Path:
    return Layout(Path(home)).results_store


FileSource = bytes | None | Callable[[], bytes | None]


def encode(records: tuple[str, ...] | list[str], statuses: Mapping[str, str], style: str,
           answers: Mapping[str, str | None] | None = None,
           files: Mapping[str, FileSource] | None = None,
           rows: Mapping[str, Mapping[str, str] | None] | None = None) -> bytes:
    """Canonical bytes (sorted keys, no spaces) of one entry's stage-3 results: the same
    results always give the same hash. `answers` for style answer-lines, `files` for files and
    for sockets (keyed "RECORD/SLUG": neither a record's name nor a slug holds a "/")."""
    return b"".join(encode_chunks(records, statuses, style, answers, files, rows))


def encode_chunks(records: tuple[str, ...] | list[str], statuses: Mapping[str, str], style: str,
                  answers: Mapping[str, str | None] | None = None,
                  files: Mapping[str, FileSource] | None = None,
                  rows: Mapping[str, Mapping[str, str] | None] | None = None) -> Iterator[bytes]:
    """encode()'s bytes in pieces, one result file at a time: a file given as a callable is
    read only when its turn comes, so an exam's files never need to be in memory together.
    The pieces are what json.dumps(doc, sort_keys=True, separators=(",", ":")) would write."""
    def dumps(obj: object) -> bytes:
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()

    yield b"{"
    if style in ("files", "sockets"):
        yield b'"files":{'
        for i, record in enumerate(sorted(files or {})):
            source = (files or {})[record]
            data = source() if callable(source) else source
            yield (b"," if i else b"") + dumps(record) + b":" + \
                (dumps(base64.b64encode(data).decode()) if data is not None else b"null")
        yield b"},"
    elif style == "table":
        yield b'"rows":' + dumps({r: None if v is None else dict(v) for r, v in (rows or {}).items()}) + b","
    else:
        yield b'"answers":' + dumps(dict(answers or {})) + b","
    yield dumps({"format": FORMAT, "records": list(records), "statuses": dict(statuses), "style": style})[1:]


def decode(data: bytes) -> ExamResults:
    """ExamResults from encode()'s bytes (or from the exam-results.json of an older home)."""
    doc = json.loads(data)
    records = tuple(doc["records"])
    if doc["style"] in ("files", "sockets"):
        files = {r: (base64.b64decode(v) if v is not None else None) for r, v in doc["files"].items()}
        if doc["style"] == "files":
            return ExamResults(records=records, files=files)
        outputs: dict[str, dict[str, bytes | None]] = {r: {} for r in records}
        for key, value in files.items():
            record, _, slug = key.partition("/")
            outputs[record][slug] = value
        return ExamResults(records=records, outputs=outputs)
    if doc["style"] == "table":
        return ExamResults(records=records, rows={r: None if v is None else dict(v) for r, v in doc["rows"].items()})
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
    with DurableFile(directory, prefix=".put.", suffix=".tmp") as f:
        for chunk in chunks:
            f.write(chunk)
        path = directory / f.sha256
        if not path.exists():  # the same results, stored before: they are kept as they are
            f.commit(path)
    return f.sha256


def get(home: Path, digest: str) -> bytes:
    path = store_dir(home) / digest
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ArchiveError(f"the archived results {digest[:12]} are missing from {path.parent}: "
                           "restore the archive from a backup, or run the entry again with --rerun-stages.") from None
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


def share(queue: Queue, home: Path, digest: str) -> None:
    """With several hosts, stage 4 and rescore may run elsewhere: stage 3's results go into
    the queue's database (once; content-addressed) before the result that names them."""
    if queue.shared:
        queue.blobs.put(digest, store_dir(home) / digest)


def fetch(queue: Queue, home: Path, digest: str) -> None:
    """With several hosts, stage 3 may have run on another one: this host's copy of its
    results, from the queue's database (checked against the hash), unless already here."""
    if not queue.shared:
        return
    for d in (store_dir(home).parent, store_dir(home)):
        private.make_dir(d)
    try:
        queue.blobs.fetch(digest, store_dir(home) / digest)
    except InfrastructureError:
        raise  # the object store down or slow: the judge's, run again as such
    except VmjudgeError as exc:
        raise ArchiveError(f"the archived results {digest[:12]} cannot be fetched: {exc}") from None


def archived_results(queue: Queue, home: Path, entry_id: int) -> ArchivedResults | None:
    """The entry's latest archived stage-3 results. A home made before the results store
    kept them as results/ID/exam-results.json: those are archived (and linked) on first use."""
    found = queue.exam_results(entry_id)
    if found is not None:
        fetch(queue, home, found.sha256)
        return found
    legacy = Path(home) / "results" / str(entry_id) / LEGACY_RESULTS_FILE
    if not legacy.is_file():
        return None
    data = legacy.read_bytes()
    try:
        decode(data)  # refuse to archive what could not be scored
    except (ValueError, KeyError, TypeError) as exc:
        raise ArchiveError(f"{legacy} cannot be read ({type(exc).__name__}: {exc}): run the entry again with "
                           "--rerun-stages.") from exc
    digest = put(home, data)
    exam_runs = [r for r in queue.stage_runs(entry_id) if r.stage == "exam" and r.status == "passed"]
    run = exam_runs[-1] if exam_runs else None
    queue.add_exam_results(entry_id, run.id if run else None, digest,
                           {**(run.manifest or {}), "imported_from": str(legacy)} if run else
                           {"imported_from": str(legacy)})
    return queue.exam_results(entry_id)
