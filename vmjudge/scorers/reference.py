"""The reference directory as scorers read it: one hash over its files, recorded with every
score (a corrected label gives a different hash), and REFERENCE.csv read by one set of rules,
so that every built-in scorer treats it alike and a malformed line is named, never scored."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from pathlib import Path

from vmjudge.errors import ScoringError
from vmjudge.files import sha256_file
from vmjudge.queue.results import ExamResults


def reference_sha256(reference: Path) -> str:
    """One hash over a reference directory (each file's relative path and sha256, in sorted
    order), recorded with every score: a corrected label gives a different hash."""
    reference = Path(reference)
    if not reference.is_dir():
        raise ScoringError(f"The reference directory {reference} does not exist: give the directory holding "
                           "the reference answers for the test set.")
    digest = hashlib.sha256()
    try:
        for path in sorted(p for p in reference.rglob("*") if p.is_file()):
            digest.update(path.relative_to(reference).as_posix().encode() + b"\0")
            digest.update(sha256_file(path).encode() + b"\n")
    except OSError as exc:
        raise ScoringError(f"The reference directory {reference} cannot be read ({exc}): give a directory "
                           "holding only the reference answers.") from exc
    return digest.hexdigest()


def read_reference_csv(reference: Path, fields: tuple[Collection[str] | None, ...],
                       form: str) -> dict[str, tuple[str, ...]]:
    """REFERENCE.csv as {record: (field, ...)}: one "RECORD,FIELD..." line per record, blank
    lines and surrounding whitespace ignored. `fields` gives, for each field after RECORD,
    the values allowed (None: any non-empty text); `form` (e.g. "RECORD,LABEL with LABEL 0
    or 1") is quoted in the error, which names the file and line, so the organiser can fix
    the reference rather than get a silently wrong score."""
    path = reference / "REFERENCE.csv"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScoringError(f"The reference file {path} cannot be read ({exc.strerror or exc}).") from exc
    table: dict[str, tuple[str, ...]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        record, values = parts[0], tuple(parts[1:])
        if (not record or len(values) != len(fields)
                or any(not v or (allowed is not None and v not in allowed)
                       for v, allowed in zip(values, fields, strict=True))):
            raise ScoringError(f"{path} line {number} is {line!r}, but each line must be {form}.")
        if record in table:
            raise ScoringError(f"{path} line {number} repeats record {record!r}: give each record one line.")
        table[record] = values
    return table


def reference_rows(results: ExamResults, table: Mapping[str, tuple[str, ...]],
                   reference: Path) -> list[tuple[str, tuple[str, ...]]]:
    """The reference line of each tested record, in test order; records only in the
    reference are ignored (a challenge may keep one file for several test sets)."""
    missing = [r for r in results.records if r not in table]
    if missing:
        raise ScoringError(f"{reference / 'REFERENCE.csv'} has no line for test record {missing[0]!r}"
                           + (f" (nor for {len(missing) - 1} more)" if len(missing) > 1 else "")
                           + ": every record of the test set needs a reference answer.")
    return [(r, table[r]) for r in results.records]
