"""What a participant is shown when next.sh on a training record did not reproduce their own
submission: both sides. "output does not match submission" alone sent them guessing; the
submitted line and the produced one (or, for result files, both sizes and the bytes around the
first difference) say what went wrong.

Only training records reach the quiz, so nothing here is ever of the test set. Every excerpt is
bounded: a line to LINE_CHARS characters, a file to EXCERPT bytes each side, however large the
files are.

When the two sides differ only in numbers, and only in their last digits, the likeliest cause
is not the entry's logic but the CPU: glibc's libm and the numerical libraries choose their code
by CPU feature (FMA, AVX2), so the same program prints other last digits on another instruction
set. The participant is then told so, and how to make outputs the judge will reproduce
(numbers_only, NUMBERS_NOTE).
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path

LINE_CHARS = 200
EXCERPT = 16  # bytes shown of each file, from a little before the first difference
BEFORE = 6
CHUNK = 1 << 16
# A number as programs print them: 3, -0.25, .5, 1e-07, 6.02E+23.
_NUMBER = re.compile(rb"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
NEAR = 1e-3  # relative: last digits, not another answer (1 against -1, 3 against 4 are not near)
NUMBERS_READ = 1 << 20  # bytes of each side compared for numbers; larger results are not


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


def _near(a: bytes, b: bytes) -> bool:
    x, y = float(a), float(b)
    if not (math.isfinite(x) and math.isfinite(y)):
        return False
    return abs(x - y) <= NEAR * max(abs(x), abs(y))


def numbers_only(submitted: bytes, produced: bytes) -> bool:
    """True when the two differ, read the same once every number is masked, and each number
    that differs is within NEAR of its counterpart: a difference of last digits."""
    if submitted == produced or _NUMBER.sub(b"#", submitted) != _NUMBER.sub(b"#", produced):
        return False
    pairs = zip(_NUMBER.findall(submitted), _NUMBER.findall(produced), strict=True)
    return all(a == b or _near(a, b) for a, b in pairs)


def numbers_only_files(submitted: Path, data: bytes, size: int, truncated: bool) -> bool:
    """numbers_only for a submitted result file and the produced one (`data`, all `size` bytes
    of it unless `truncated`), both read whole only when within NUMBERS_READ."""
    if truncated or size > NUMBERS_READ:
        return False
    try:
        st = os.lstat(submitted)
        if not stat.S_ISREG(st.st_mode) or st.st_size > NUMBERS_READ:
            return False
        with open(submitted, "rb") as f:
            theirs = f.read(NUMBERS_READ + 1)
    except OSError:
        return False
    return numbers_only(theirs, data)


def numbers_note(level: str | None) -> str:
    """The sentence for participants under a mismatch in numbers alone; `level`: the x86-64 level
    of the judge's guest, when the run recorded it."""
    judge = f"the judge's VMs give {level}" if level else "the judge's VMs give the CPU level its replica names"
    return (f"Only numbers differ, in their last digits: CPU differences can cause this, as maths libraries pick "
            f"their code by CPU feature ({judge}); make the submitted outputs with the judge's replica on a "
            "machine of that level, or round them.")
