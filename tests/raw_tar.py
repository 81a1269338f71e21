"""Tars written header by header, every field as a test wants it: what well-behaved tools write,
and what no tool writes but a hostile entry can (old headers with a prefix, sparse PAX records,
NUL in a PAX path, a PAX header and a GNU long name before one member, ...).

The differential tests read these with vmjudge's reader and with Go's (tests/go_tar), and
the image tests build hostile images from them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

BLOCK = 512
POSIX = b"ustar\x0000"
GNU = b"ustar  \x00"
V7 = b"\x00" * 8


def octal(value: int, width: int) -> bytes:
    return b"%0*o\x00" % (width - 1, value)


@dataclass
class Header:
    """One 512-byte header; `fields` overwrites raw bytes at offsets after the rest is laid out."""

    name: bytes = b"f"
    kind: bytes = b"0"
    size: int = 0
    linkname: bytes = b""
    prefix: bytes = b""
    magic: bytes = POSIX
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    size_field: bytes | None = None
    fields: dict[int, bytes] = field(default_factory=dict)
    checksum: str = "unsigned"  # or "signed", "wrong"

    def block(self) -> bytes:
        h = bytearray(BLOCK)
        h[0:len(self.name[:100])] = self.name[:100]
        h[100:108] = octal(self.mode, 8)
        h[108:116] = octal(self.uid, 8)
        h[116:124] = octal(self.gid, 8)
        h[124:136] = self.size_field if self.size_field is not None else octal(self.size, 12)
        h[136:148] = octal(1700000000, 12)
        h[156:157] = self.kind
        h[157:157 + len(self.linkname[:100])] = self.linkname[:100]
        h[257:265] = self.magic
        if self.magic != V7:
            h[265:269] = h[297:301] = b"root"
        h[345:345 + len(self.prefix[:155])] = self.prefix[:155]
        for at, raw in self.fields.items():
            h[at:at + len(raw)] = raw
        h[148:156] = b" " * 8
        total = sum(h) if self.checksum != "signed" else sum(b - 256 if b > 127 else b for b in h)
        if self.checksum == "wrong":
            total += 1
        h[148:156] = b"%06o\x00 " % (total & 0o777777)
        return bytes(h)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def member(header: Header, data: bytes = b"") -> bytes:
    """A header and its data, padded."""
    return header.block() + padded(data)


def pax_record(key: str | bytes, value: str | bytes) -> bytes:
    k = key.encode() if isinstance(key, str) else key
    v = value.encode() if isinstance(value, str) else value
    body = b" " + k + b"=" + v + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body


def pax(records: list[tuple[str | bytes, str | bytes]] | bytes, kind: bytes = b"x") -> bytes:
    """A PAX header (kind x, or g for a global one) holding `records` (or raw bytes)."""
    body = records if isinstance(records, bytes) else b"".join(pax_record(k, v) for k, v in records)
    return member(Header(b"././@PaxHeader", kind, len(body)), body)


def gnu_long(kind: bytes, value: bytes) -> bytes:
    body = value + b"\x00"
    return member(Header(b"././@LongLink", kind, len(body), magic=GNU), body)


def end(zeros: int = 2 * BLOCK) -> bytes:
    return bytes(zeros)


def tar(*parts: bytes, zeros: int = 2 * BLOCK) -> bytes:
    return b"".join(parts) + end(zeros)


# --- random tars: the differential fuzzing's input ---------------------------------------------

NAMES = [b"a", b"dir/", b"dir/b", b"x" * 99, b"x" * 100, b"caf\xc3\xa9", b"bad\xff\xfename", b"./c", b"/abs",
         b"../up", b"a/../b", b"manifest.json", b"d/", b"e//f", b" space", b"tab\tname"]
PAX_KEYS = ["path", "linkpath", "size", "uid", "gid", "mtime", "atime", "ctime", "uname", "gname",
            "SCHILY.xattr.user.x", "GNU.sparse.major", "GNU.sparse.minor", "GNU.sparse.name", "GNU.sparse.realsize",
            "GNU.sparse.size", "GNU.sparse.numblocks", "GNU.sparse.offset", "GNU.sparse.numbytes", "GNU.sparse.map",
            "hdrcharset", "comment", "charset", "LIBARCHIVE.xattr.user.y", "SCHILY.xattr."]
VALUES = [b"1", b"0", b"12", b"+5", b" 5", b"5_0", b"05", b"-1", b"1.5", b"99999999999999999999", b"BINARY",
          b"name", b"long/" * 30, b"nul\x00byte", b"caf\xc3\xa9", b"\xff\xfe", b"", b"dir/", b"x" * 120, b"1e3"]
SIZE_FIELDS = [b"00000000012\x00", b"         12 ", b"12\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
               b"\x00\x00\x0000000012", b"0000000001_2", b"00000000+12", b"\x80" + bytes(10) + b"\x0c",
               b"\xff" * 12, b"\x81" + bytes(11), b"1\x002\x00       ", b"\t12\x00        ", b"000000000012"]
KINDS = ([b"0"] * 8 + [b"5", b"5", b"2", b"1", b"3", b"4", b"6"] * 2
         + [b"\x00", b"7", b"S", b"g", b"V", b"N", b"D", b"Z"])
MAGICS = [POSIX] * 12 + [GNU] * 4 + [V7, b"ustar\x00xx", b"ustar \x00 "]


def random_tar(rng: random.Random) -> bytes:
    """A tar of a few members, each maybe preceded by extended headers, its fields drawn from
    values that tools write and values that two readers may take differently."""
    parts = []
    for _ in range(rng.randint(0, 5)):
        if rng.random() < 0.3:
            records: list[tuple[str | bytes, str | bytes]] = [
                (rng.choice(PAX_KEYS), rng.choice(VALUES + [rng.choice(NAMES)])) for _ in range(rng.randint(1, 3))]
            raw = b"".join(pax_record(k, v) for k, v in records)
            if rng.random() < 0.15:
                raw = rng.choice([raw[:-1], raw + b"junk", b"0" + raw, raw.replace(b" ", b"  ", 1), b"3 a=\n" + raw])
            parts.append(pax(raw, rng.choice([b"x", b"x", b"x", b"g"])))
        if rng.random() < 0.15:
            parts.append(gnu_long(rng.choice([b"L", b"K"]), rng.choice(NAMES + [b"n" * 150, b"a\x00b"])))
        if rng.random() < 0.1:
            parts.append(pax([("path", rng.choice(NAMES))]))
        kind = rng.choice(KINDS)
        data = rng.randbytes(rng.choice([0, 1, 12, 511, 512, 513, 1500]) if kind == b"0" or rng.random() < 0.1 else 0)
        link = rng.choice([b"", b"a", b"target", b"../x", b"/abs"])
        h = Header(name=rng.choice(NAMES), kind=kind, size=len(data), linkname=link,
                   magic=rng.choice(MAGICS),
                   uid=rng.choice([0, 1000, 65534]), mode=rng.choice([0o644, 0o755, 0o4755, 0o100644]))
        if rng.random() < 0.1:
            h.prefix = rng.choice([b"x", b"pre/fix", b"p" * 155, b"\x00x"])
        if rng.random() < 0.05:
            h.fields[508] = b"tar\x00"
        if rng.random() < 0.05:
            h.fields[345] = rng.choice([b"\x01", octal(1700000000, 12)])
        if rng.random() < 0.08:
            h.size_field = rng.choice(SIZE_FIELDS)
        if rng.random() < 0.05:
            h.checksum = rng.choice(["signed", "wrong"])
        parts.append(member(h, data))
    zeros = rng.choice([0, BLOCK] + [2 * BLOCK] * 6 + [20 * BLOCK] * 2)
    tail = rng.choice([b""] * 8 + [b"garbage", bytes(7)])
    return b"".join(parts) + bytes(zeros) + tail
