"""WFDB annotation files (MIT format) and record headers, read as WFDB's own library reads
them for bxb, so that beats2014 compares the very sample times the 2014 Challenge compared.

wfdb-python's rdann is not used here: it returns the times as written, while WFDB's reader
moves every time onto the record's sample grid when a file declares another time resolution
(rounding halves up), keeps the file's order, and fails a file that ends before its
end-of-file word; those are the rules the official scores came from. The format is WFDB's
published annotation format (annot(5)); nothing here needs WFDB's C tools.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

# Annotation codes (WFDB's ecgcodes.h) that bxb treats specially.
NOISE = 14
NOTE = 22
FLUTTER_WAVE = 31  # "!": a QRS code for WFDB, but bxb maps it to no beat class
VF_ON = 32  # "["
VF_OFF = 33  # "]"
# WFDB's isqrs(): the codes of beat annotations (N L R a V F J A S E j / Q B ? ! e n f r).
QRS_CODES = frozenset({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 25, 30, 31, 34, 35, 38, 41})

DEFAULT_FREQUENCY = 250.0  # WFDB_DEFFREQ: what WFDB assumes for a record with no frequency
TIME_MAX = (1 << 63) - 1  # WFDB_TIME_MAX

# Pseudo-annotation codes (the top 6 bits of a word) that modify the annotation before them.
_SKIP, _NUM, _SUB, _CHN, _AUX = 59, 60, 61, 62, 63
_RESOLUTION = "## time resolution: "
_NUMBER_RE = re.compile(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_AHA_FIRST = frozenset(b"EFNOPQRUV")  # AHA codes WFDB takes a file's first byte pair for


class NotAnnotationFile(ValueError):
    """The bytes are not a whole MIT-format annotation file."""


@dataclass(frozen=True)
class Annotation:
    time: int  # sample number on the record's grid
    code: int
    subtype: int


@dataclass(frozen=True)
class Header:
    """What bxb takes from a record's header: its sampling frequency and its length in samples
    (0: unknown, and bxb then compares until the reference annotations end)."""

    frequency: float
    samples: int


def read_header(path: Path) -> Header | None:
    """The record line of a .hea file ("NAME[/SEGMENTS] NSIG [FS[/CF[(BASE)]] [NSAMP ...]]");
    None when the file does not exist. A missing or non-positive frequency is WFDB's 250 Hz."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return None
    line = next((s for s in (raw.strip() for raw in text.splitlines()) if s and not s.startswith("#")), "")
    fields = line.split()
    frequency = _c_number(fields[2].split("/")[0].split("(")[0]) if len(fields) > 2 else None
    samples = int(fields[3]) if len(fields) > 3 and fields[3].isdigit() else 0
    return Header(frequency=frequency if frequency and frequency > 0 else DEFAULT_FREQUENCY, samples=samples)


def declared_resolution(data: bytes) -> float | None:
    """The time resolution an annotation file declares (its "## time resolution: F" note), if any."""
    _, resolution = _decode(data)
    return resolution


def read_annotations(data: bytes, frequency: float) -> list[Annotation]:
    """The annotations of a file, in file order, timed in samples of a record sampled at
    `frequency`. As WFDB's getann: a file declaring its own time resolution R has each time
    multiplied by frequency/R (in double precision) and rounded, halves up; the notes at
    sample 0 that declare it (or redefine mnemonics) are not returned; bytes after the
    end-of-file word are ignored. Raises NotAnnotationFile for a file that ends before its
    end-of-file word or is in the AHA format."""
    raw, resolution = _decode(data)
    scale = frequency / resolution if resolution else 1.0
    # The file is the entry's: a declared resolution such as 1e-320 makes every time infinite
    # (C's conversion is undefined there), which must fail the record, not the scorer.
    times = [tt * scale for tt, _, _ in raw]
    if not all(math.isfinite(t) and abs(t) <= TIME_MAX for t in times):
        raise NotAnnotationFile("the file declares a time resolution that puts its times off any record's grid")
    return [Annotation(time=_round_half_up(t), code=code, subtype=subtype)
            for t, (_, code, subtype) in zip(times, raw, strict=True)]


def _decode(data: bytes) -> tuple[list[tuple[int, int, int]], float | None]:
    """(unscaled time, code, subtype) of each annotation after the leading definition notes,
    and the declared time resolution."""
    words = _Words(data)
    word = words.u16()
    if word & 0xFF == 0 and (word >> 8) in _AHA_FIRST:
        raise NotAnnotationFile("the file is in the AHA format, not the MIT format")
    tt = 0
    while word >> 10 == _SKIP:  # leading SKIPs set the first annotation's base time
        tt += words.s32()
        word = words.u16()
    found: list[tuple[int, int, int, bytes | None]] = []
    while word != 0:  # a zero word is the logical end of the file
        tt += word & 0x3FF
        code, subtype, aux = word >> 10, 0, None
        at = tt
        word = words.u16()
        while word >> 10 >= _SKIP:
            kind = word >> 10
            if kind == _SKIP:
                tt += words.s32()
            elif kind == _SUB:
                subtype = word & 0x3FF
            elif kind == _AUX:
                length = word & 0xFF
                aux = words.take(length + (length & 1))[:length]
            word = words.u16()
        found.append((at, code, subtype, aux))
    resolution = None
    start = 0
    while start < len(found) and found[start][0] == 0 and found[start][1] == NOTE and found[start][2] == 0:
        aux = found[start][3]
        if aux and aux.startswith(_RESOLUTION.encode()):
            match = _NUMBER_RE.match(aux[len(_RESOLUTION) - 1:].decode("latin-1"))
            resolution = float(match.group(1)) if match else None
        start += 1
    if resolution is not None and resolution <= 0:
        resolution = None
    return [(at, code, subtype) for at, code, subtype, _ in found[start:]], resolution


class _Words:
    """The file's 16-bit little-endian words; 32-bit values are two words, high word first."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise NotAnnotationFile("the file ends before its end-of-file word")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "little")

    def s32(self) -> int:
        value = (self.u16() << 16) | self.u16()
        return value - (1 << 32) if value >= 1 << 31 else value


def _round_half_up(x: float) -> int:
    """WFDB's round_to_time: to the nearest integer, halves towards +infinity."""
    whole = int(x)  # truncates towards zero, as C's conversion does
    if x >= 0:
        return whole + 1 if x - whole >= 0.5 else whole
    return whole - 1 if x - whole < -0.5 else whole


def _c_number(text: str) -> float | None:
    match = _NUMBER_RE.match(text)
    return float(match.group(1)) if match else None
