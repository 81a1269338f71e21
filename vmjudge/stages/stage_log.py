"""A stage's log on disk, written as the entry's output arrives.

An exam of thousands of records, each allowed a megabyte of output, must cost the host
neither that much memory nor that much disk. The transcript hands each chunk of output
here as it arrives (the head of each command's output, as the job caps it), the end of the
output (its tail) when the command ends, and a status line per command; once the log holds
`cap` bytes of output it keeps only the status lines, and says so once. The organiser reads
it (`show --organiser`); only the judge's own words ever come out of it for participants.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

from .. import private
from ..vm.channel import CommandResult


class StageLog:
    def __init__(self, path: Path, cap: int, gpu: bool = False):
        self.path = Path(path)
        self.cap = cap
        self.gpu = gpu  # the image carries a GPU driver: the log opens with what the guest found
        self.kept = 0  # output bytes written
        self._full = False
        self._at_line_start = True
        self._file = private.create(self.path)  # test-set output is a channel for test labels

    def __enter__(self) -> StageLog:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def hello(self, info: dict[str, Any]) -> None:
        """The guest's GPU, as the agent found it before any command (nvidia-smi's name, memory
        and driver; or why there is none): the organiser's first line of a GPU stage's log."""
        gpu = info.get("gpu")
        if self.gpu and isinstance(gpu, dict):
            self._line(gpu_line(gpu))

    def started(self, cmd: CommandResult) -> None:
        self._line(f"=== {cmd.name}")

    def output(self, cmd: CommandResult, data: bytes) -> None:
        self._output(data)

    def ended(self, cmd: CommandResult) -> None:
        if cmd.omitted or cmd.tail:
            self._output(f"{'' if self._at_line_start else chr(10)}[... {cmd.omitted} bytes of output not kept "
                         "...]\n".encode())
            self._output(bytes(cmd.tail))
        detail = f"exit {cmd.exit_code}, {cmd.seconds:.1f} s, {cmd.output_bytes} bytes of output"
        if cmd.message:
            detail += f"; {cmd.message}"
        self._line(f"--- {cmd.name}: {cmd.status} ({detail})")

    def _line(self, text: str) -> None:
        if not self._at_line_start:
            self._file.write(b"\n")
        self._file.write(text.encode("utf-8", "replace") + b"\n")
        self._at_line_start = True

    def _output(self, data: bytes) -> None:
        if not data or self._full:
            return
        room = self.cap - self.kept
        if len(data) >= room:
            data = data[:room]
            self._full = True
        self._file.write(data)
        self.kept += len(data)
        if data:
            self._at_line_start = data.endswith(b"\n")
        if self._full:
            self._line(f"[the stage log holds {self.cap} bytes of output, its cap: from here on only each "
                       "command's status line is kept]")


def gpu_line(gpu: dict[str, Any]) -> str:
    """One line, bounded whatever the guest sent."""
    if gpu.get("state") == "ok":
        text = (f"gpu: {gpu.get('name')}, {gpu.get('memory_mib')} MiB, driver {gpu.get('driver')} "
                f"(nvidia-smi: {gpu.get('line')})")
    else:
        text = f"gpu: {gpu.get('state')}: {gpu.get('why')}"
    return text.replace("\n", " ")[:1000]
