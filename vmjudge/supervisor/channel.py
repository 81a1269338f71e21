"""The host end of the data channel: pyserial on the channel's pty, frames into results.

The link is one-way (guest to host). Anything wrong with it — a bad CRC, a gap in the
sequence, a wrong nonce, a frame out of place, silence — is the judge's failure, never the
entry's, so every such case raises InfrastructureError with reason "channel-broken" or
"channel-silent".
"""

from __future__ import annotations

import select
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import InfrastructureError
from ..images.guest.frames import Decoder, Frame, FrameError

READ_SIZE = 1 << 20
MAX_LOGS = 256  # agent log lines kept, each at most MAX_LOG_BYTES
MAX_LOG_BYTES = 4096
MAX_FILES = 64  # result files per command


class ChannelClosed(Exception):
    """The guest side of the pty went away (the domain stopped)."""


class ChannelReader:
    """Reads what arrives on the pty, in raw mode, without blocking past a deadline."""

    def __init__(self, pty_path: str):
        import serial  # here, not at the top: the replica ISO's Python has no pyserial and needs no pty

        try:
            self._port = serial.Serial(pty_path, timeout=0, exclusive=True)
        except (serial.SerialException, OSError) as exc:
            raise InfrastructureError("channel-broken", f"cannot open the data channel {pty_path}: {exc}")

    def read(self, timeout: float) -> bytes:
        """Bytes available within `timeout` seconds (b"" if none); ChannelClosed at the end."""
        try:
            ready, _, _ = select.select([self._port.fileno()], [], [], max(timeout, 0))
            if not ready:
                return b""
            waiting = self._port.in_waiting
            data = self._port.read(min(max(waiting, 1), READ_SIZE))
        except OSError as exc:  # serial.SerialException is an OSError
            raise ChannelClosed(str(exc))
        if not data:
            raise ChannelClosed("end of stream")
        return data

    def close(self) -> None:
        self._port.close()


@dataclass
class FileResult:
    name: str
    size: int | None  # None: the command left no such file
    data: bytes = b""

    @property
    def truncated(self) -> bool:
        return self.size is not None and self.size > len(self.data)


@dataclass
class CommandResult:
    index: int
    name: str
    status: str = "running"  # ok | error | timeout
    exit_code: int | None = None
    seconds: float = 0.0
    output: bytearray = field(default_factory=bytearray)
    output_bytes: int = 0
    truncated: bool = False
    message: str = ""
    files: dict[str, FileResult] = field(default_factory=dict)
    host_capped: bool = False  # the guest sent more than the job allowed; the host kept the allowance


@dataclass
class Transcript:
    """Everything the guest reported, assembled frame by frame."""

    nonce: str
    hello: dict[str, Any] | None = None
    commands: list[CommandResult] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    raw: bytearray = field(default_factory=bytearray)
    agent_error: str | None = None
    bye: dict[str, Any] | None = None
    frames: int = 0
    # (seq, kind, host monotonic time) of every frame but data and ticks: host-side timings.
    timeline: list[tuple[int, str, float]] = field(default_factory=list)
    # The host's own caps, per command index: (output bytes, bytes per result file). The agent
    # caps too, but the host never trusts it to: a flooding guest cannot grow host memory.
    # None (tests of the frame format only) means no command is expected.
    limits: tuple[tuple[int, int], ...] | None = None
    allow_raw: bool = False
    _file: FileResult | None = None

    @property
    def finished(self) -> bool:
        return self.bye is not None

    def _broken(self, message: str) -> InfrastructureError:
        return InfrastructureError("channel-broken", f"the data channel broke: {message}")

    def add(self, frame: Frame, arrived: float) -> None:
        self.frames += 1
        kind = frame.kind
        if kind not in ("out", "fdata", "tick"):
            self.timeline.append((frame.seq, kind, arrived))
        if self.hello is None:
            if kind != "hello":
                raise self._broken(f"the first frame is {kind!r}, not hello")
            hello = frame.json()
            if hello.get("nonce") != self.nonce:
                if hello.get("nonce") is None:
                    self.hello = hello  # the agent could not read the job; an error frame follows
                    return
                raise self._broken(f"the guest answered with nonce {hello.get('nonce')!r}, not this run's; "
                                   "the CD-ROM or the channel belongs to another run")
            self.hello = hello
            return
        if self.bye is not None:
            raise self._broken(f"frame {frame.seq} ({kind}) arrived after the last frame")
        if self.hello.get("nonce") is None and kind not in ("error", "bye"):
            raise self._broken("the guest sent no nonce and no error")
        current = self.commands[-1] if self.commands and self.commands[-1].status == "running" else None
        if kind == "tick":
            return
        if kind == "log":
            if len(self.logs) < MAX_LOGS:
                self.logs.append(frame.payload[:MAX_LOG_BYTES].decode("utf-8", "replace"))
        elif kind == "raw":
            if not self.allow_raw:
                raise self._broken("the guest sent a raw frame the job did not ask for")
            self.raw += frame.payload
        elif kind == "start":
            if current is not None:
                raise self._broken(f"command {current.index} was still running when another started")
            info = frame.json()
            index = int(info["index"])
            if index != len(self.commands) or (self.limits is not None and index >= len(self.limits)):
                raise self._broken(f"the guest started command {index}, which is not the job's next command")
            self.commands.append(CommandResult(index=index, name=str(info["name"])))
        elif kind in ("out", "file", "fdata", "end"):
            if current is None:
                raise self._broken(f"a {kind} frame came with no command running")
            self._command_frame(current, frame)
        elif kind == "error":
            self.agent_error = str(frame.json().get("message", "no message"))
        elif kind == "bye":
            if current is not None:
                raise self._broken(f"the guest said goodbye while command {current.index} was running")
            self.bye = frame.json()
        else:
            raise self._broken(f"unexpected {kind} frame")

    def _cap(self, cmd: CommandResult, which: int) -> int | None:
        return None if self.limits is None else self.limits[cmd.index][which]

    def _command_frame(self, cmd: CommandResult, frame: Frame) -> None:
        if frame.kind == "out":
            room = self._cap(cmd, 0)
            room = len(frame.payload) if room is None else max(room - len(cmd.output), 0)
            cmd.output += frame.payload[:room]
            cmd.host_capped = cmd.host_capped or room < len(frame.payload)
        elif frame.kind == "file":
            info = frame.json()
            size = info.get("size")
            if len(cmd.files) >= MAX_FILES:
                raise self._broken(f"command {cmd.index} sent back more than {MAX_FILES} files")
            self._file = FileResult(name=str(info["name"]), size=None if size is None else int(size))
            cmd.files[self._file.name] = self._file
        elif frame.kind == "fdata":
            if self._file is None:
                raise self._broken("file data came before its file header")
            room = self._cap(cmd, 1)
            room = len(frame.payload) if room is None else max(room - len(self._file.data), 0)
            self._file.data += frame.payload[:room]
        else:  # end
            info = frame.json()
            cmd.status = str(info["status"])
            if cmd.status not in ("ok", "error", "timeout"):
                raise self._broken(f"command {cmd.index} ended with unknown status {cmd.status!r}")
            cmd.exit_code = info.get("exit_code")
            cmd.seconds = float(info.get("seconds", 0.0))
            cmd.output_bytes = int(info.get("output_bytes", len(cmd.output)))
            cmd.truncated = bool(info.get("truncated", False)) or cmd.host_capped
            cmd.message = str(info.get("message", ""))
            self._file = None


class FrameStream:
    """Decoder plus transcript: bytes in, a growing Transcript out, errors as infrastructure faults."""

    def __init__(self, nonce: str, limits: tuple[tuple[int, int], ...] | None = None, allow_raw: bool = False):
        self.decoder = Decoder()
        self.transcript = Transcript(nonce=nonce, limits=limits, allow_raw=allow_raw)

    def feed(self, data: bytes) -> int:
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            raise InfrastructureError("channel-broken", f"the data channel broke: {exc}")
        arrived = time.monotonic()
        for frame in frames:
            try:
                self.transcript.add(frame, arrived)
            except (FrameError, KeyError, ValueError, TypeError) as exc:
                raise InfrastructureError("channel-broken", f"the data channel broke: frame {frame.seq} "
                                          f"({frame.kind}) is malformed: {exc}")
        return len(frames)

