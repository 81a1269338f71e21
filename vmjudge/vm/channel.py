"""The host end of the data channel: frames into results (pty_reader.py reads the bytes).

The link is one-way (guest to host). Anything wrong with it — a bad CRC, a gap in the sequence,
a wrong nonce, a frame out of place, silence — is the judge's failure, never the entry's, so
every such case raises InfrastructureError with reason "channel-broken" or "channel-silent".

A stage may run thousands of commands, each allowed a megabyte of output: the host's
memory must not grow with them. So a Transcript can hand each command's output to a log
on disk as it arrives (Watch.log), let the stage consume each command's result files when
it ends (Watch.on_end), and keep the bytes of the last command only (Watch.keep_all off);
the commands' statuses and sizes stay, a few hundred bytes each.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import InfrastructureError
from ..images.guest.frames import Decoder, Frame, FrameError
from ..reasons import entry_reason
from .samples import RUN_SAMPLES, Sample, read_samples

MAX_LOGS = 256  # agent log lines kept, each at most MAX_LOG_BYTES
MAX_LOG_BYTES = 4096
MAX_FILES = 64  # result files per command


class ChannelClosed(Exception):
    """The guest side of the pty went away (the domain stopped)."""


# Frames whose arrival times the host keeps (benchmarks read them): one or two a command.
TIMED = ("hello", "start", "end", "raw", "bye")


def _text(value: Any, limit: int) -> str:
    """A string from the guest, as the queue can store it: capped, and valid UTF-8 (a lone
    surrogate would make SQLite refuse the stage's result)."""
    return str(value)[:limit].encode("utf-8", "replace").decode("utf-8")


USAGE_KEYS = ("cpu_seconds", "peak_memory", "oom_kills", "processes")


def figure(value: Any) -> float | None:
    """A figure from the guest as the host keeps it: a finite number from 0 to 2**62, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) and 0 <= value <= 1 << 62 else None


def _usage(value: Any) -> dict[str, float | None] | None:
    """A command's usage as the host keeps it: the known keys only, each a figure or None."""
    if not isinstance(value, dict):
        return None
    return {k: figure(value.get(k)) for k in USAGE_KEYS}


@dataclass(frozen=True)
class Caps:
    """The host's own caps for one command; the agent caps too, but the host never trusts it
    to: a flooding guest cannot grow host memory. `files` are the names the job collects."""

    output: int  # head bytes
    tail: int  # bytes of the end of the output, beyond the head
    file: int  # bytes per result file
    files: tuple[str, ...] = ()


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
    output: bytearray = field(default_factory=bytearray)  # the head
    # With InRoot.stderr_apart: the head of what it wrote to stderr (Grand Challenge's warnings), and how much.
    errors: bytearray = field(default_factory=bytearray)
    error_bytes: int = 0
    tail: bytearray = field(default_factory=bytearray)  # the end, when the output was longer
    output_bytes: int = 0
    truncated: bool = False
    message: str = ""
    files: dict[str, FileResult] = field(default_factory=dict)
    host_capped: bool = False  # the guest sent more than the job allowed; the host kept the allowance
    # What an entry command used, from its own cgroup in the guest (images/guest/usage.py):
    # cpu_seconds, peak_memory (bytes), oom_kills, processes (at most); None for root's commands
    # and older agents, a figure the guest could not read None too.
    usage: dict[str, float | None] | None = None
    samples: tuple[Sample, ...] | None = None  # its use over time (samples.py), bounded
    # When (host monotonic) its last out frame arrived: where the head of its output ended, which its
    # end frame follows only after the sweep and the figures (the channel benchmark's framed copy).
    output_arrived: float | None = None

    @property
    def omitted(self) -> int:
        """Output bytes the command printed that neither the head nor the tail holds."""
        return max(self.output_bytes - len(self.output) - len(self.tail), 0)

    def release(self) -> None:
        """Drop the bytes (output, result files), keep the facts."""
        self.output = bytearray()
        self.tail = bytearray()
        self.errors = bytearray()
        for f in self.files.values():
            f.data = b""


class CommandLog(Protocol):
    """Where a run's output goes as it arrives (a stage log on disk)."""

    def started(self, cmd: CommandResult) -> None: ...

    def output(self, cmd: CommandResult, data: bytes) -> None: ...

    def ended(self, cmd: CommandResult) -> None: ...

    def hello(self, info: dict[str, Any]) -> None: ...


@dataclass
class Watch:
    """What the host does with a run's commands as they go by.

    `log` receives the output as it arrives; `on_end` sees each command once it has ended,
    result files and all, and returns True to stop the run there (the quiz's first mismatch);
    with `keep_all` off, a command's bytes are dropped once the next command starts, so only
    the last command's output and files stay in memory."""

    log: CommandLog | None = None
    on_end: Callable[[CommandResult], bool] | None = None
    keep_all: bool = True


@dataclass
class Transcript:
    """Everything the guest reported, assembled frame by frame."""

    nonce: str
    hello: dict[str, Any] | None = None
    commands: list[CommandResult] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    raw: bytearray = field(default_factory=bytearray)
    agent_error: str | None = None
    entry_fault: str | None = None  # the agent's error is the entry's doing: this reason code
    gpu_fault: bool = False  # the agent's error is the GPU's: the job needed one and it did not work
    bye: dict[str, Any] | None = None
    frames: int = 0
    # (seq, kind, host monotonic time) of every frame but data and ticks: host-side timings.
    timeline: list[tuple[int, str, float]] = field(default_factory=list)
    # The host's own caps, per command index. None (tests of the frame format only) means no
    # command is expected and nothing is capped.
    limits: tuple[Caps, ...] | None = None
    allow_raw: bool = False
    watch: Watch = field(default_factory=Watch)
    stopped: bool = False  # watch.on_end asked to stop: later frames are not read
    sampled: int = 0  # samples kept of its commands, at most RUN_SAMPLES
    _file: FileResult | None = None

    @property
    def finished(self) -> bool:
        return self.bye is not None

    def _broken(self, message: str) -> InfrastructureError:
        return InfrastructureError("channel-broken", f"the data channel broke: {message}")

    def add(self, frame: Frame, arrived: float) -> None:
        self.frames += 1
        kind = frame.kind
        # Bounded whatever the guest sends: the commands' own frames, and the first logs.
        if kind in TIMED or (kind == "log" and len(self.logs) < MAX_LOGS):
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
            if self.watch.log is not None:
                self.watch.log.hello(hello)
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
            if not self.watch.keep_all and self.commands:
                self.commands[-1].release()
            cmd = CommandResult(index=index, name=_text(info["name"], 200))
            self.commands.append(cmd)
            if self.watch.log is not None:
                self.watch.log.started(cmd)
        elif kind in ("out", "err", "tail", "file", "fdata", "end"):
            if current is None:
                raise self._broken(f"a {kind} frame came with no command running")
            if kind == "out":
                current.output_arrived = arrived
            self._command_frame(current, frame)
        elif kind == "error":
            info = frame.json()
            self.agent_error = _text(info.get("message", "no message"), 4096)
            if info.get("fault") == "entry":
                self.entry_fault = entry_reason(_text(info.get("reason", ""), 64))
            self.gpu_fault = info.get("fault") == "gpu"
        elif kind == "bye":
            if current is not None:
                raise self._broken(f"the guest said goodbye while command {current.index} was running")
            self.bye = frame.json()
        else:
            raise self._broken(f"unexpected {kind} frame")

    def _room(self, cmd: CommandResult, cap: str, have: int, offered: int) -> int:
        limit = None if self.limits is None else getattr(self.limits[cmd.index], cap)
        return offered if limit is None else max(min(limit - have, offered), 0)

    def _command_frame(self, cmd: CommandResult, frame: Frame) -> None:
        payload = frame.payload
        if frame.kind == "out":
            room = self._room(cmd, "output", len(cmd.output), len(payload))
            cmd.output += payload[:room]
            cmd.host_capped = cmd.host_capped or room < len(payload)
            if room and self.watch.log is not None:
                self.watch.log.output(cmd, payload[:room])
        elif frame.kind == "err":
            room = self._room(cmd, "output", len(cmd.errors), len(payload))
            cmd.errors += payload[:room]
            cmd.host_capped = cmd.host_capped or room < len(payload)
            if room and self.watch.log is not None:  # the stage's log (the organiser's) keeps stderr too
                self.watch.log.output(cmd, payload[:room])
        elif frame.kind == "tail":
            room = self._room(cmd, "tail", len(cmd.tail), len(payload))
            cmd.tail += payload[:room]
            cmd.host_capped = cmd.host_capped or room < len(payload)
        elif frame.kind == "file":
            info = frame.json()
            size = info.get("size")
            name = _text(info["name"], 4096)
            if len(cmd.files) >= MAX_FILES or name in cmd.files or (
                    self.limits is not None and not _asked(name, self.limits[cmd.index].files, cmd.files)):
                raise self._broken(f"command {cmd.index} sent back a file the job did not ask for, or twice")
            self._file = FileResult(name=name, size=None if size is None else int(size))
            cmd.files[self._file.name] = self._file
        elif frame.kind == "fdata":
            if self._file is None:
                raise self._broken("file data came before its file header")
            room = self._room(cmd, "file", len(self._file.data), len(payload))
            self._file.data += payload[:room]
        else:  # end
            info = frame.json()
            cmd.status = str(info["status"])
            if cmd.status not in ("ok", "error", "timeout"):
                raise self._broken(f"command {cmd.index} ended with unknown status {cmd.status!r}")
            exit_code = info.get("exit_code")
            if not (exit_code is None or (isinstance(exit_code, int) and -(1 << 31) <= exit_code < 1 << 31)):
                raise self._broken(f"command {cmd.index} ended with an exit code that is not a number")
            cmd.exit_code = exit_code
            seconds = float(info.get("seconds", 0.0))
            cmd.seconds = min(max(seconds, 0.0), 1e9) if math.isfinite(seconds) else 0.0
            cmd.output_bytes = min(max(int(info.get("output_bytes", len(cmd.output))), 0), 1 << 62)
            cmd.truncated = bool(info.get("truncated", False)) or cmd.host_capped
            cmd.message = _text(info.get("message", ""), 4096)
            cmd.usage = _usage(info.get("usage"))
            cmd.samples = read_samples(info.get("usage"), RUN_SAMPLES - self.sampled)
            self.sampled += len(cmd.samples or ())
            error_bytes = info.get("error_bytes", len(cmd.errors))
            cmd.error_bytes = min(max(error_bytes, 0), 1 << 62) if isinstance(error_bytes, int) else len(cmd.errors)
            self._file = None
            if self.watch.log is not None:
                self.watch.log.ended(cmd)
            if self.watch.on_end is not None and self.watch.on_end(cmd):
                self.stopped = True


def _asked(name: str, collect: tuple[str, ...], sent: dict[str, FileResult]) -> bool:
    """A name the command was asked to send back: a collected file, a collected directory's listing
    ("images/NAME/"), or that directory's one file, sent after its listing said it holds only it."""
    if name in collect:
        return True
    folder, _, last = name.rpartition("/")
    listing = sent.get(folder + "/")
    return bool(folder and last) and listing is not None and listing.size == 1 and \
        listing.data.decode("utf-8", "replace") == last and not any(k.startswith(folder + "/") and k != folder + "/"
                                                                    for k in sent)


class FrameStream:
    """Decoder plus transcript: bytes in, a growing Transcript out, errors as infrastructure faults."""

    def __init__(self, nonce: str, limits: tuple[Caps, ...] | None = None, allow_raw: bool = False,
                 watch: Watch | None = None):
        self.decoder = Decoder(allow_raw=allow_raw)
        self.transcript = Transcript(nonce=nonce, limits=limits, allow_raw=allow_raw, watch=watch or Watch())

    def feed(self, data: bytes) -> int:
        """Decode and take in `data`; the number of frames taken. Once the watch has asked
        to stop, nothing more is read."""
        if self.transcript.stopped:
            return 0
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            raise InfrastructureError("channel-broken", f"the data channel broke: {exc}") from None
        arrived = time.monotonic()
        for taken, frame in enumerate(frames, 1):
            try:
                self.transcript.add(frame, arrived)
            except (FrameError, KeyError, ValueError, TypeError, ArithmeticError) as exc:
                raise InfrastructureError("channel-broken", f"the data channel broke: frame {frame.seq} "
                                          f"({frame.kind}) is malformed: {exc}") from exc
            if self.transcript.stopped:
                return taken
        return len(frames)

