"""challenge.toml's [entry] and [container]: what kind of entry a challenge takes, and how big.

An entry is either PhysioNet's archive (`*entry.zip`, `*entry.tar.gz`: setup.sh and next.sh
run in the judge's own root) or, with `[entry] kind = "container"`, a participant's container
image as `docker save` or `podman save` writes it, whose root the entry's commands run in, or with
`[entry] kind = "submission"` DrivenData's `submission.zip` ([submission], submission.py). An
image carries a whole operating system, so that kind's limits start larger: 2 GiB of archive,
8 GiB unpacked, half a million files. [container] says where a case's files go in and where
the entry leaves its results, and what to run; it belongs to the container kind alone, so a
challenge that sets it without the kind is refused rather than half read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .values import Section

ENTRY_KINDS = ("archive", "container", "submission")
RUN_MODES = ("per_case", "whole_set")
# Where an image's input and output may not be: the guest mounts its own file systems there.
RESERVED_PATHS = ("/proc", "/sys", "/dev")
RELPATH_RE = re.compile(r"^(?!/)(?!.*(^|/)\.\.(/|$))[A-Za-z0-9_.{}/-]+$")
_ABSPATH_RE = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")
COMMAND_MAX = 256  # words in [container] command


@dataclass(frozen=True)
class EntryRules:
    """What an entry must hold and how big it may be; `kind` is "archive" or "container"."""

    required: tuple[str, ...] = ("setup.sh", "next.sh")
    max_size: int = 50 << 20  # archive bytes
    max_members: int = 10000
    max_unpacked: int = 1 << 30
    # Scored entries an owner may have per board (official or late) of this challenge; None: no limit.
    # A phase of a contest is a challenge of its own, so this is PhysioNet's "N entries per phase".
    max_scored_per_owner: int | None = None
    kind: str = "archive"


# The container kind's defaults: a Debian base image is some 120 MB and 9000 files; one with a
# deep-learning framework some 5-8 GB and 100000-200000 files, which max_size and max_unpacked
# refuse at these defaults unless the organiser raises them.
CONTAINER_DEFAULTS = EntryRules(required=(), max_size=2 << 30, max_members=500_000, max_unpacked=8 << 30,
                                kind="container")
# DrivenData's submission.zip: code and model assets (their runtimes take a few hundred MB to a few GB).
SUBMISSION_DEFAULTS = EntryRules(required=(), max_size=1 << 30, max_members=100_000, max_unpacked=4 << 30,
                                 kind="submission")


@dataclass(frozen=True)
class ContainerRules:
    """[container]: where each case's input is put in the entry's root (read-only) and where the
    entry leaves its output (empty at the start of each run); `command` what runs, None for the
    image's own ENTRYPOINT and CMD; `run` whether the command runs once per case or once for the
    whole set."""

    input: str = "/input"
    output: str = "/output"
    command: tuple[str, ...] | None = None
    run: str = "per_case"
    # MiB of a disk of its own for each run's /tmp, empty at its start, as Grand Challenge gives a job (125 GB on a
    # g4dn.xlarge); None: /tmp is in the run's layer on the VM's home disk, with the rest of what it writes.
    tmp: int | None = None


def entry_rules(source: str, data: dict[str, Any]) -> EntryRules:
    sec = Section(source, "entry", data.get("entry", {}))
    kind = sec.get("kind", str, "archive", lambda v: v in ENTRY_KINDS, " or ".join(f'"{k}"' for k in ENTRY_KINDS))
    base = {"container": CONTAINER_DEFAULTS, "submission": SUBMISSION_DEFAULTS}.get(kind, EntryRules())
    if kind != "archive" and "required" in sec.data:
        raise ConfigError(f"{source}: [entry] required is for archive entries, and kind = \"{kind}\" takes "
                          f"{'an image' if kind == 'container' else 'main.py or main.sh'}: remove required.")
    rules = EntryRules(
        kind=kind,
        required=sec.names("required", RELPATH_RE, "relative paths such as \"setup.sh\" or \"sources/\"")
        or base.required,
        max_size=sec.get("max_size", int, base.max_size, lambda v: 1 <= v <= 1 << 40, "a number of bytes"),
        max_members=sec.get("max_members", int, base.max_members, lambda v: 1 <= v <= 10**6,
                            "a count from 1 to 1000000"),
        max_unpacked=sec.get("max_unpacked", int, base.max_unpacked, lambda v: 1 <= v <= 1 << 42,
                             "a number of bytes"),
        max_scored_per_owner=sec.get("max_scored_per_owner", int, None, lambda v: 1 <= v <= 10**6,
                                     "a whole number from 1 to 1000000, or leave the key out for no limit"))
    sec.done()
    return rules


def _image_path(value: str) -> bool:
    return (bool(_ABSPATH_RE.fullmatch(value)) and not {".", ".."} & set(value.split("/"))
            and not any(value == p or value.startswith(p + "/") for p in RESERVED_PATHS))


def image_results_path(value: str) -> bool:
    """A container entry's submitted results ([results] submitted): an absolute path in its image
    holding {record}, with plain parts (no "." or ".."), not where the guest mounts its own."""
    parts = value.split("/")
    return (value.startswith("/") and "{record}" in value and bool(RELPATH_RE.fullmatch(value[1:]))
            and all(p not in ("", ".", "..") for p in parts[1:])
            and not any(value == p or value.startswith(p + "/") for p in RESERVED_PATHS))


def _command(value: list[Any]) -> bool:
    return (0 < len(value) <= COMMAND_MAX and all(isinstance(w, str) and "\0" not in w for w in value)
            and bool(value[0]))


def container_rules(source: str, data: dict[str, Any], kind: str) -> ContainerRules | None:
    """[container] of a container challenge (its defaults when the table is absent); None for an
    archive challenge, which may not have the table."""
    if kind != "container":
        if "container" in data:
            raise ConfigError(f"{source}: [container] is for container entries only: add kind = \"container\" to "
                              "[entry], or remove [container].")
        return None
    sec = Section(source, "container", data.get("container", {}))
    where = ("an absolute path such as \"/input\" (letters, digits, '.', '_' and '-' in each part; not \"/\" and "
             f"not under {', '.join(RESERVED_PATHS)})")
    command = sec.get("command", list, None, _command, f"a list of 1 to {COMMAND_MAX} strings, the first not empty, "
                      "such as [\"/app/run\", \"--fast\"]")
    rules = ContainerRules(
        input=sec.get("input", str, ContainerRules.input, _image_path, where),
        output=sec.get("output", str, ContainerRules.output, _image_path, where),
        command=None if command is None else tuple(command),
        run=sec.get("run", str, ContainerRules.run, lambda v: v in RUN_MODES, " or ".join(f'"{m}"' for m in RUN_MODES)),
        tmp=sec.get("tmp", int, None, lambda v: 16 <= v <= 1 << 22, "a whole number of MiB from 16 to 4194304"))
    sec.done()
    inp, out = rules.input, rules.output
    if inp == out or inp.startswith(out + "/") or out.startswith(inp + "/"):
        raise ConfigError(f"{source}: [container] input = {inp!r} and output = {out!r} overlap: the input is "
                          "read-only and the output starts empty, so give them separate paths such as \"/input\" "
                          "and \"/output\".")
    return rules
