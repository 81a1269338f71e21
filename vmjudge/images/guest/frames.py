"""The data channel's frame format, shared by the guest agent and the host.

This file runs inside the guest too (copied into the image beside agent.py), so it
uses the standard library only and must stay importable on the guest's Python.

A frame is one ASCII header line followed by a binary payload:

    VMJ1 <kind> <seq> <length> <crc32>\n<payload>

The CRC covers the kind, the sequence number, the length and the payload, so a header
that was damaged in a way that still parses is caught as surely as damaged data. The
line form keeps the stream readable in a hex dump and lets the host say exactly where a
stream stopped making sense.
"""

import json
import re
import zlib

MAGIC = b"VMJ1"
PROTOCOL = 2  # 2: "tail" frames (the end of a command's output beyond its head)
MAX_PAYLOAD = 1 << 20
# A "raw" frame is sent only when the host's job asks for one (the channel benchmark's
# baseline: a file copied to the port by `cat` in one piece), so it may be larger.
MAX_RAW_PAYLOAD = 64 << 20
MAX_HEADER = 64
KINDS = ("hello", "start", "out", "tail", "file", "fdata", "end", "tick", "log", "error", "raw", "bye", "err")
# JSON payloads are small objects the agent writes; anything nested deeper is not the agent's.
MAX_JSON_DEPTH = 4

_HEADER_RE = re.compile(rb"VMJ1 ([a-z]{1,8}) (\d{1,12}) (\d{1,9}) ([0-9a-f]{8})\n\Z")


class FrameError(Exception):
    """The byte stream is not a valid sequence of frames."""


def checksum(kind: str, seq: int, length: int, payload: bytes) -> int:
    """CRC-32 over the header fields and the payload; `payload` may be any buffer."""
    crc = zlib.crc32(b"%s %d %d" % (kind.encode("ascii"), seq, length))
    return zlib.crc32(payload, crc)


def header(kind: str, seq: int, length: int, crc: int) -> bytes:
    if kind not in KINDS:
        raise ValueError(f"unknown frame kind {kind!r}")
    return b"VMJ1 %s %d %d %08x\n" % (kind.encode("ascii"), seq, length, crc)


def header_of(kind: str, seq: int, payload: bytes = b"") -> bytes:
    """The header of a frame carrying `payload` (any buffer), to be written just before it."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"frame payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return header(kind, seq, len(payload), checksum(kind, seq, len(payload), payload))


def encode(kind: str, seq: int, payload: bytes = b"") -> bytes:
    """Header and payload as one bytes object (small frames; large ones are written as
    header_of() and the payload, not joined)."""
    return header_of(kind, seq, payload) + bytes(payload)


def encode_json(kind: str, seq: int, obj: object) -> bytes:
    return encode(kind, seq, json.dumps(obj, sort_keys=True).encode("utf-8"))


class Frame:
    __slots__ = ("kind", "seq", "payload")

    def __init__(self, kind: str, seq: int, payload: bytes):
        self.kind = kind
        self.seq = seq
        self.payload = payload

    def json(self) -> dict:
        if _nesting(self.payload) > MAX_JSON_DEPTH:
            raise FrameError(f"frame {self.seq} ({self.kind}) carries JSON nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            obj = json.loads(self.payload.decode("utf-8"))
        except ValueError as exc:
            raise FrameError(f"frame {self.seq} ({self.kind}) should carry JSON but does not: {exc}") from None
        if not isinstance(obj, dict):
            raise FrameError(f"frame {self.seq} ({self.kind}) should carry a JSON object")
        return obj

    def __repr__(self) -> str:
        return f"Frame({self.kind!r}, {self.seq}, {len(self.payload)} bytes)"


def _nesting(payload: bytes) -> int:
    """How deep brackets nest in a JSON text, strings skipped: checked before parsing, so a
    deeply nested payload is refused without recursing into it."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in bytes(payload):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


class Decoder:
    """Incremental decoder: feed() bytes as they arrive, get back whole frames.

    It also checks the sequence: frames must be numbered 0, 1, 2, ... with no gap,
    because a lost frame would silently drop part of an entry's output. A "raw" frame is
    refused at its header unless the job asked for one, before its (up to 64 MiB) payload
    is buffered.
    """

    def __init__(self, max_payload: int = MAX_PAYLOAD, allow_raw: bool = False):
        self._buf = bytearray()
        self._max_payload = max_payload
        self._allow_raw = allow_raw
        self._pending: tuple[str, int, int, int] | None = None  # parsed header waiting for its payload
        self.next_seq = 0
        self.offset = 0  # stream offset of the start of _buf, for error messages

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while True:
            frame = self._next()
            if frame is None:
                return frames
            frames.append(frame)

    def _next(self) -> Frame | None:
        if self._pending is None:
            end = self._buf.find(b"\n", 0, MAX_HEADER)
            if end < 0:
                if len(self._buf) >= MAX_HEADER or not MAGIC.startswith(bytes(self._buf[:4])):
                    raise FrameError(f"bytes at channel offset {self.offset} are not a frame header: "
                                     f"{bytes(self._buf[:32])!r}")
                return None
            match = _HEADER_RE.match(bytes(self._buf[:end + 1]))
            if match is None:
                raise FrameError(f"bytes at channel offset {self.offset} are not a frame header: "
                                 f"{bytes(self._buf[:min(end + 1, 32)])!r}")
            kind = match.group(1).decode("ascii")
            seq, length, crc = int(match.group(2)), int(match.group(3)), int(match.group(4), 16)
            if kind not in KINDS:
                raise FrameError(f"frame {seq} has unknown kind {kind!r}")
            if kind == "raw" and not self._allow_raw:
                raise FrameError(f"frame {seq} is a raw frame, which the job did not ask for")
            limit = MAX_RAW_PAYLOAD if kind == "raw" else self._max_payload
            if length > limit:
                raise FrameError(f"frame {seq} announces {length} bytes, more than the limit of {limit}")
            if seq != self.next_seq:
                raise FrameError(f"frame sequence gap: expected frame {self.next_seq}, got {seq}")
            del self._buf[:end + 1]
            self.offset += end + 1
            self._pending = (kind, seq, length, crc)
        kind, seq, length, crc = self._pending
        if len(self._buf) < length:
            return None
        payload = bytes(self._buf[:length])
        del self._buf[:length]
        self.offset += length
        self._pending = None
        if checksum(kind, seq, length, payload) != crc:
            raise FrameError(f"frame {seq} ({kind}, {length} bytes) failed its CRC check")
        self.next_seq += 1
        return Frame(kind, seq, payload)

    def in_frame(self) -> bool:
        """True when the stream stopped in the middle of a frame."""
        return self._pending is not None or len(self._buf) > 0
