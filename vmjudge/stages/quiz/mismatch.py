"""What a participant is shown when next.sh on a training record did not reproduce their own
submission: both sides. "output does not match submission" alone sent them guessing; the
submitted line and the produced one (or, for result files, both sizes and the bytes around the
first difference) say what went wrong.

Only training records reach the quiz, so nothing here is ever of the test set. Every excerpt is
bounded: a line to LINE_CHARS characters, a file to EXCERPT bytes each side, however large the
files are.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

LINE_CHARS = 200
EXCERPT = 16  # bytes shown of each file, from a little before the first difference
BEFORE = 6
CHUNK = 1 << 16


def _shown(text: str) -> str:
    text = text if len(text) <= LINE_CHARS else text[:LINE_CHARS] + "…"
    return repr(text)[1:-1]  # control characters as escapes, on one line


def line_detail(record: str, submitted: str | None, produced: str | None, sheet: str) -> str:
    """The two answer lines for `record` (submitted in the entry's `sheet`, produced in answers.txt)."""
    sub = f"{record},{_shown(submitted)}" if submitted is not None else f"no line for {record}"
    got = f"{record},{_shown(produced)}" if produced is not None else f"no line for {record}"
    return f"\n  submitted ({sheet}): {sub}\n  produced (answers.txt): {got}"


def first_difference(path: Path, data: bytes) -> int | None:
    """The offset of the first byte where the file at `path` and `data` differ (the shorter's
    length when one is the other's start); None when they are the same. Read in chunks, up to
    the difference."""
    offset = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            theirs = data[offset:offset + len(chunk)]
            if chunk != theirs:
                return offset + next((i for i, (a, b) in enumerate(zip(chunk, theirs, strict=False)) if a != b),
                                     min(len(chunk), len(theirs)))
            if not chunk:
                return None if offset == len(data) else offset
            offset += len(chunk)


def _row(part: bytes, offset: int) -> str:
    if not part:
        return "(the file ends before it)"
    text = "".join(chr(b) if 32 <= b < 127 else "." for b in part)
    return f"{offset:08x}  {part.hex(' '):<{EXCERPT * 3 - 1}}  |{text}|"


def file_detail(submitted: Path, submitted_name: str, produced_name: str, data: bytes, size: int,
                truncated: bool) -> str:
    """Both sizes and, where they first differ, the bytes of each side (produced: `data`, the
    head of a file of `size` bytes, all of it unless `truncated`)."""
    try:
        st = os.lstat(submitted)
    except OSError:
        return f"\n  the entry has no {submitted_name}"
    if not stat.S_ISREG(st.st_mode):
        return f"\n  {submitted_name} in the entry is not a regular file"
    shown = f"\n  submitted {submitted_name}: {st.st_size} bytes\n  produced {produced_name}: {size} bytes"
    at = first_difference(submitted, data)
    if at is None or (truncated and at >= len(data)):  # the difference lies beyond what the judge kept
        return shown + f"\n  they agree on the first {len(data)} bytes, the most the judge keeps of a result file"
    start = max(at - BEFORE, 0)
    with open(submitted, "rb") as f:
        f.seek(start)
        theirs = f.read(EXCERPT)
    return (shown + f"\n  first difference at byte {at}:\n    submitted: {_row(theirs, start)}"
            f"\n    produced:  {_row(data[start:start + EXCERPT], start)}")
