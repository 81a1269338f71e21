"""What a VM is asked to do: the commands, their limits, and what goes on its CD-ROM.

The host writes this as job.json on the CD; the guest agent reads it back. Stages build
Jobs; nothing in a Job comes from an entry except file contents placed on the CD, and, for a
container entry, its root file system (Job.entry_root, a disk of its own) and the few facts of
its image's config that InRoot carries (its user, environment and working directory), which
the host read from the image and checked here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..images.guest import frames
from .channel import Caps

MIB = 1 << 20
JOB_FILE = "job.json"  # on the CD, readable by the guest's root only
# Time the agent may need around each command (links, collecting files, framing).
COMMAND_SLACK = 5.0
# Where the guest mounts file systems of its own in an entry's root: neither the input nor the
# output may be there, nor the root itself.
RESERVED_IN_ROOT = ("/proc", "/sys", "/dev")
# A record set's disk (Job.data), found by the agent by its serial, as the entry root's is.
DATA_SERIAL = "vmjudge-data-"
DATA_DISKS_MAX = 4
ENV_MAX = 1000  # variables in an image's environment
ENV_MAX_BYTES = 128 << 10
_ENV_NAME_RE = re.compile(r"^[^=\0]+$")


def _root_path(value: str, what: str) -> str:
    """An absolute, normal path in the entry's root, outside RESERVED_IN_ROOT."""
    parts = value.split("/")
    if not value.startswith("/") or value == "/" or "\0" in value or len(value) > 1024 or \
            any(p in ("", ".", "..") for p in parts[1:]):
        raise ValueError(f"{what} must be an absolute path such as /input, without . or .. parts: {value!r}")
    if any(value == r or value.startswith(r + "/") for r in RESERVED_IN_ROOT):
        raise ValueError(f"{what} may not be under {', '.join(RESERVED_IN_ROOT)}: {value!r}")
    return value


def _cd_path(value: str, what: str) -> str:
    parts = PurePosixPath(value).parts
    if not value or value.startswith("/") or "\0" in value or ".." in parts or value in (".", "./"):
        raise ValueError(f"{what} must be a path on the CD, relative and below its top: {value!r}")
    return value


def under(media: Mapping[str, Path | bytes], cd_dir: str) -> dict[str, Path | bytes]:
    """The media under a CD directory, by their paths in it: what a data disk of it holds."""
    return {name[len(cd_dir) + 1:]: source for name, source in media.items() if name.startswith(cd_dir + "/")}


@dataclass(frozen=True)
class InRoot:
    """A command that runs in the entry's own root (Job.entry_root), as its container image
    would: the image's user (mapped by the agent to a user that is not root), environment and
    working directory; `input` (read-only, the command's files from the CD: `input_files` by
    their base names, or the CD directory `input_dir` as a whole) and `output` (empty at the
    start of each command; Command.collect names files in it, relative to it).

    user: the image's USER, "uid[:gid]" or "name[:group]" (looked up in the image's own
    /etc/passwd and /etc/group by the agent); "", "root" and uid 0 run as the guest's entry user."""

    user: str = ""
    env: tuple[str, ...] = ()  # "NAME=value" each, the image's ENV
    workdir: str = "/"
    input: str = "/input"
    output: str = "/output"
    input_files: tuple[str, ...] = ()
    input_dir: str | None = None
    stderr_apart: bool = False  # its stderr relayed apart from its stdout ("err" frames), as Grand Challenge keeps it
    binds: tuple[tuple[str, str], ...] = ()  # (path in the root, CD directory) bound read-only: a ground truth

    def __post_init__(self) -> None:
        _root_path(self.input, "the input")
        _root_path(self.output, "the output")
        if self.input == self.output or self.input.startswith(self.output + "/") or \
                self.output.startswith(self.input + "/"):
            raise ValueError(f"the input {self.input} and the output {self.output} overlap")
        if not self.workdir.startswith("/") or "\0" in self.workdir or len(self.workdir) > 1024:
            raise ValueError(f"the working directory must be an absolute path: {self.workdir!r}")
        if len(self.user) > 256 or any(c in self.user for c in "\0\n") or self.user.count(":") > 1:
            raise ValueError(f"not a user such as 1000:1000 or app: {self.user!r}")
        if len(self.env) > ENV_MAX or sum(len(v) for v in self.env) > ENV_MAX_BYTES:
            raise ValueError(f"an image's environment is at most {ENV_MAX} variables and {ENV_MAX_BYTES} bytes")
        for var in self.env:
            name, eq, value = var.partition("=")
            if not eq or not _ENV_NAME_RE.fullmatch(name) or "\0" in value:
                raise ValueError(f"not an environment variable NAME=value: {var!r}")
        if self.input_files and self.input_dir is not None:
            raise ValueError("the input is either files or a directory from the CD, not both")
        names = [PurePosixPath(_cd_path(f, "an input file")).name for f in self.input_files]
        if len(set(names)) != len(names):
            raise ValueError(f"two input files share a name in {self.input}: {sorted(names)}")
        if self.input_dir is not None:
            _cd_path(self.input_dir, "the input directory")
        for path, cd_dir in self.binds:
            _root_path(path, "a bind's path")
            _cd_path(cd_dir, "a bind's CD directory")
            if any(path == p or path.startswith(p + "/") or p.startswith(path + "/")
                   for p in (self.input, self.output)):
                raise ValueError(f"the bind at {path} overlaps the input or the output")

    def document(self) -> dict:
        return {"user": self.user, "env": list(self.env), "workdir": self.workdir, "input": self.input,
                "output": self.output, "input_files": list(self.input_files), "input_dir": self.input_dir,
                **({"stderr_apart": True} if self.stderr_apart else {}),
                **({"binds": [{"path": p, "cd_dir": d} for p, d in self.binds]} if self.binds else {})}


@dataclass(frozen=True)
class CodeDir:
    """DrivenData's runtime layout (config/submission.py): the entry's home, where prep installed the
    unzipped submission, seen at `path` and the working directory of every command; the CD directory
    `data_from` (a record set, perhaps a data disk) read-only at `path`/`data`."""

    path: str
    data: str
    data_from: str
    # Stepped (DrivenData's airport runtime): the data is each command's own (Command.steps), and the CD is kept
    # from the entry, so that no step reads a later one's.
    stepped: bool = False

    def __post_init__(self) -> None:
        _root_path(self.path, "the code directory")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.data) or self.data in (".", ".."):
            raise ValueError(f"the data directory must be a plain name in the code directory: {self.data!r}")
        if "/" in _cd_path(self.data_from, "the data's CD directory"):
            raise ValueError(f"the data's CD directory must be at the CD's top: {self.data_from!r}")

    def document(self) -> dict:
        return {"path": self.path, "data": self.data, "from": self.data_from, **({"stepped": True} if self.stepped
                                                                                  else {})}


@dataclass(frozen=True)
class Command:
    name: str
    argv: tuple[str, ...]
    timeout: float
    output_limit: int = MIB  # the head of the output, kept as it arrives
    tail_limit: int = 0  # the end of the output beyond the head, kept too
    user: str = "entry"  # "root" only for the judge's own checks (doctor, benchmarks)
    links: tuple[str, ...] = ()  # CD paths linked into the working directory for this command
    collect: tuple[str, ...] = ()  # files (relative to home, or to InRoot.output) sent back after the command
    file_limit: int | None = None
    root: InRoot | None = None  # run in the entry's own root (Job.entry_root), not in the guest's
    # A stepped submission's step (CodeDir.stepped): the directories of the code's data set (paths in it, the
    # latest step first) seen together, read-only, at the code's data; the collected files removed before it starts.
    steps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.root is not None and (self.user != "entry" or self.links):
            raise ValueError(f"command {self.name!r} runs in the entry's root: as the entry, its files in "
                             "InRoot.input_files rather than links")
        for step in self.steps:
            if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*", step):
                raise ValueError(f"a step is a relative path of plain names in the data set: {step!r}")

    def document(self) -> dict:
        doc = {"name": self.name, "argv": list(self.argv), "timeout": self.timeout,
               "output_limit": self.output_limit, "tail_limit": self.tail_limit, "user": self.user,
               "links": list(self.links),
               "collect": list(self.collect), "file_limit": self.file_limit or self.output_limit}
        if self.root is not None:  # absent, not null, for the guest's own commands: their job.json is as it was
            doc["root"] = self.root.document()
        if self.steps:
            doc["steps"] = list(self.steps)
        return doc


@dataclass(frozen=True)
class Job:
    commands: tuple[Command, ...]
    media: Mapping[str, Path | bytes] = field(default_factory=dict)
    install: str | None = None  # a CD directory copied into the home directory first
    stop_on_failure: bool = False
    raw_copy: str | None = None  # benchmark: a CD file copied to the channel by `cat`
    heartbeat: float = 2.0
    # A container entry's root file system, a squashfs file the VM is given as a read-only disk
    # (vm/runner.py): the commands with an InRoot run in it. Its directories must be crossable by
    # libvirt's qemu user, as a home disk's are.
    entry_root: Path | None = None
    # CD directories that are a record set (their files are the media under them): the judge's runner
    # gives each as a read-only disk made once for every VM (images/data_disk.py), mounted by the agent
    # over that directory of the CD; another runner puts the files on the CD, as before.
    data: tuple[str, ...] = ()
    # [container] tmp: MiB of a disk of its own for the /tmp of the commands in the entry's root, each a new
    # directory on it (None: their /tmp is in their layers on the home disk).
    tmp_mib: int | None = None
    # A submission's runtime layout (DrivenData's /code_execution): its commands run there, the data beside them.
    code: CodeDir | None = None

    def __post_init__(self) -> None:
        if self.entry_root is None and any(c.root is not None for c in self.commands):
            raise ValueError("a command runs in the entry's root, and the job has no entry_root")
        if self.code is not None and (self.entry_root is not None or any(c.user != "entry" for c in self.commands)):
            raise ValueError("a code directory is for the entry's commands in the guest's own root")
        stepped = self.code is not None and self.code.stepped
        if any(bool(c.steps) != stepped for c in self.commands):
            raise ValueError("a stepped code directory's commands each have their steps, and no other's do")
        if self.tmp_mib is not None and (self.entry_root is None or self.tmp_mib < 1):
            raise ValueError("a /tmp disk is for a job with an entry root, and has a size")
        for d in self.data:
            if "/" in _cd_path(d, "a data set's directory") or len(self.data) > DATA_DISKS_MAX:
                raise ValueError(f"a data set is a directory at the CD's top, at most {DATA_DISKS_MAX}: {d!r}")

    def data_files(self, cd_dir: str) -> dict[str, Path | bytes]:
        """The media under a data set's directory, by their paths in it."""
        return under(self.media, cd_dir)

    def cd_media(self) -> dict[str, Path | bytes]:
        """The media that go on the CD when the data sets are disks of their own."""
        return {name: source for name, source in self.media.items()
                if not any(name.startswith(d + "/") for d in self.data)}

    def job_json(self, nonce: str, gpu: bool = False, seed: str | None = None, data_disks: bool = False) -> bytes:
        """`data_disks`: each of Job.data is a disk (serial DATA_SERIAL + its index) to mount over its
        directory of the CD. `gpu`: the VM is lent a GPU, and the agent must find it working before any command
        (else it runs none and says the GPU failed: the slot's fault, not the entry's). `seed`:
        fresh host randomness (hex) the agent mixes into the kernel's pool before any command."""
        doc = {"protocol": frames.PROTOCOL, "nonce": nonce, "heartbeat": self.heartbeat,
               "stop_on_failure": self.stop_on_failure, "install": self.install, "raw_copy": self.raw_copy,
               "commands": [{**c.document(), **({"cwd": self.code.path} if self.code else {})}
                            for c in self.commands]}
        if self.code is not None:  # mounted by the agent before the first command
            doc["code"] = self.code.document()
        if gpu:
            doc["gpu"] = True
        if self.entry_root is not None:  # the agent mounts it; its path on the host is none of the guest's business
            doc["entry_root"] = True
        if self.tmp_mib:
            doc["tmp_disk"] = True
        if data_disks and self.data:
            doc["data_disks"] = [{"serial": f"{DATA_SERIAL}{i}", "dir": d} for i, d in enumerate(self.data)]
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
