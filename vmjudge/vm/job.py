"""What a VM is asked to do: the commands, their limits, and what goes on its CD-ROM.

The host writes this as job.json on the CD; the guest agent reads it back. Stages build
Jobs; nothing in a Job comes from an entry except file contents placed on the CD.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..images.guest import frames
from .channel import Caps

MIB = 1 << 20
JOB_FILE = "job.json"  # on the CD, readable by the guest's root only
# Time the agent may need around each command (links, collecting files, framing).
COMMAND_SLACK = 5.0


@dataclass(frozen=True)
class Command:
    name: str
    argv: tuple[str, ...]
    timeout: float
    output_limit: int = MIB  # the head of the output, kept as it arrives
    tail_limit: int = 0  # the end of the output beyond the head, kept too
    user: str = "entry"  # "root" only for the judge's own checks (doctor, benchmarks)
    links: tuple[str, ...] = ()  # CD paths linked into the working directory for this command
    collect: tuple[str, ...] = ()  # files (relative to home) sent back after the command
    file_limit: int | None = None

    def document(self) -> dict:
        return {"name": self.name, "argv": list(self.argv), "timeout": self.timeout,
                "output_limit": self.output_limit, "tail_limit": self.tail_limit, "user": self.user,
                "links": list(self.links),
                "collect": list(self.collect), "file_limit": self.file_limit or self.output_limit}


@dataclass(frozen=True)
class Job:
    commands: tuple[Command, ...]
    media: Mapping[str, Path | bytes] = field(default_factory=dict)
    install: str | None = None  # a CD directory copied into the home directory first
    stop_on_failure: bool = False
    raw_copy: str | None = None  # benchmark: a CD file copied to the channel by `cat`
    heartbeat: float = 2.0

    def job_json(self, nonce: str, gpu: bool = False, seed: str | None = None) -> bytes:
        """`gpu`: the VM is lent a GPU, and the agent must find it working before any command
        (else it runs none and says the GPU failed: the slot's fault, not the entry's). `seed`:
        fresh host randomness (hex) the agent mixes into the kernel's pool before any command."""
        doc = {"protocol": frames.PROTOCOL, "nonce": nonce, "heartbeat": self.heartbeat,
               "stop_on_failure": self.stop_on_failure, "install": self.install, "raw_copy": self.raw_copy,
               "commands": [c.document() for c in self.commands]}
        if gpu:
            doc["gpu"] = True
        if seed is not None:
            doc["seed"] = seed
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    def host_limits(self) -> tuple[Caps, ...]:
        """Each command's caps, as the host enforces them."""
        return tuple(Caps(c.output_limit, c.tail_limit, c.file_limit or c.output_limit, c.collect)
                     for c in self.commands)

    def time_budget(self) -> float:
        """The longest the commands may take, by their own limits, plus the agent's slack."""
        return sum(c.timeout + COMMAND_SLACK for c in self.commands)
