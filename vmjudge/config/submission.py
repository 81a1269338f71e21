"""challenge.toml's [submission], for `[entry] kind = "submission"`: DrivenData's code execution (#60).

A participant uploads `submission.zip`, with `main.py` (or `main.sh`) at its root and whatever model
assets it needs. The judge unzips it into the runtime's code directory (`/code_execution`), puts the
record set's files read-only in the data directory (`/code_execution/data`), with the set's
`submission_format.csv`, and runs `python3 main.py` once over the whole set, in that directory, as the
entry user, with no network; `main.py` leaves `submission.csv` there, which is checked against the
format (stages/submission_check.py) and, in the exam, scored by its rows.

A record set of this kind is a directory of any files (the features, images, a table): its records
are the ids of its submission format, the first column of `submission_format.csv`, in its order.

A stepped challenge (`steps = true`, as DrivenData's airport-configuration runtime reveals its test data
one prediction time at a time) splits each set into ordered steps, `SET/steps/NAME/`, each holding the
data that step reveals and its own submission format (the rows to predict then). The command runs once
per step, in the steps' order by name, with the step's name as its last argument and, in the data
directory, only the steps so far (the union of their directories, a later step's file in place of an
earlier one's of the same path); each step's submission.csv is checked against that step's format, and
the steps' rows are joined into one submission. The set's records are the steps' ids, in order.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import ConfigError
from .records import RECORD_RE
from .values import Section

MAINS = ("main.py", "main.sh")
ORDERS = ("same", "any")
FORMAT_MAX = 64 << 20  # bytes of a submission_format.csv the judge reads into memory
_ABSPATH_RE = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
STEPS = "steps"  # a stepped set's directory of steps
_STEP_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")
# The guest overlays a step's data from the steps so far, named in one mount option (the kernel takes a page of
# them, and overlayfs stacks at most 500 layers): the names, each with its separator, may take this many bytes.
STEPS_MAX = 500
STEP_NAMES_MAX = 3500
# What a runtime's directories may not be: the guest's own (its system, the judge's files, the entry's home).
_RESERVED = ("/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/opt", "/var",
             "/run", "/tmp", "/media", "/home", "/root", "/srv", "/mnt")


@dataclass(frozen=True)
class SubmissionRules:
    """Where DrivenData's runtime puts things: the code directory (the unzipped submission, the working
    directory of the run), the data directory's name in it, the file the run must leave there, the
    format file in each record set, whether rows must keep the format's order, and the command
    (None: `python3 main.py`, or `sh main.sh` for a submission with no main.py)."""

    code_dir: str = "/code_execution"
    data: str = "data"  # a directory of code_dir: the record set, read-only
    output: str = "submission.csv"  # left in code_dir by the run
    format: str = "submission_format.csv"  # in each record set's directory
    order: str = "same"  # the rows in the format's order, as DrivenData's check demands; "any"
    command: tuple[str, ...] | None = None
    steps: bool = False  # each set in ordered steps (SET/steps/NAME/), the command once per step

    @property
    def data_dir(self) -> str:
        return f"{self.code_dir}/{self.data}"

    def argv(self, mains: set[str]) -> tuple[str, ...]:
        """The run's command for a submission holding `mains` of MAINS."""
        if self.command is not None:
            return self.command
        return ("python3", "main.py") if "main.py" in mains else ("sh", "main.sh")


def _code_dir(value: str) -> bool:
    return bool(_ABSPATH_RE.fullmatch(value)) and not {".", ".."} & set(value.split("/")) and \
        not any(value == r or value.startswith(r + "/") for r in _RESERVED)


def submission_rules(source: str, data: dict[str, Any], kind: str) -> SubmissionRules | None:
    """[submission] of a submission challenge (its defaults when absent); None for another kind, which
    may not have the table."""
    if kind != "submission":
        if "submission" in data:
            raise ConfigError(f"{source}: [submission] is for submission entries only: add kind = \"submission\" to "
                              "[entry], or remove [submission].")
        return None
    sec = Section(source, "submission", data.get("submission", {}))
    name = "a plain file or directory name such as \"data\" (letters, digits, '.', '_', '-')"
    command = sec.get("command", list, None, lambda v: 0 < len(v) <= 64 and all(
        isinstance(w, str) and w and "\0" not in w for w in v), "a list of 1 to 64 strings such as [\"python3\", "
        "\"main.py\"]")
    rules = SubmissionRules(
        code_dir=sec.get("code_dir", str, SubmissionRules.code_dir, _code_dir,
                         "an absolute path such as \"/code_execution\", not under the guest's own directories "
                         f"({', '.join(_RESERVED)})"),
        data=sec.get("data", str, SubmissionRules.data, lambda v: bool(_NAME_RE.fullmatch(v)) and v not in (".", ".."),
                     name),
        output=sec.get("output", str, SubmissionRules.output, lambda v: bool(_NAME_RE.fullmatch(v)) and
                       v not in (".", ".."), name),
        format=sec.get("format", str, SubmissionRules.format, lambda v: bool(_NAME_RE.fullmatch(v)), name),
        order=sec.get("order", str, SubmissionRules.order, lambda v: v in ORDERS,
                      "\"same\" (the rows in the format's order) or \"any\""),
        command=tuple(command) if command is not None else None,
        steps=sec.get("steps", bool, False, allowed="true (each set in ordered steps, SET/steps/NAME/) or false"))
    sec.done()
    if rules.output == rules.data:
        raise ConfigError(f"{source}: [submission] output and data are both {rules.data!r}: name them apart.")
    return rules


@dataclass(frozen=True)
class SubmissionFormat:
    """A record set's submission format: its index's name, its columns (the index first), and its rows
    by id, each a dict of column -> the format's value (what decides the column's type)."""

    columns: tuple[str, ...]
    rows: dict[str, dict[str, str]]

    @property
    def index(self) -> str:
        return self.columns[0]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self.rows)


def read_format(path: Path) -> SubmissionFormat:
    """The organiser's submission format; ConfigError naming the file and what is wrong with it."""
    try:
        size = path.stat().st_size
        if size > FORMAT_MAX:
            raise ConfigError(f"{path} is {size:,} bytes, more than the {FORMAT_MAX:,} a submission format may be.")
        with open(path, newline="", encoding="utf-8") as f:
            table = list(csv.reader(f))
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing: a submission challenge's record set needs its submission format "
                          "there (an id column, then the columns an entry must fill).") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"{path} cannot be read as a UTF-8 CSV file: {exc}.") from None
    if not table or len(table[0]) < 2:
        raise ConfigError(f"{path} needs a header of at least two columns: the id, then what an entry predicts.")
    columns = tuple(table[0])
    if len(set(columns)) != len(columns) or not all(columns):
        raise ConfigError(f"{path}'s header names a column twice or leaves one unnamed: {', '.join(columns)}.")
    rows: dict[str, dict[str, str]] = {}
    for n, row in enumerate(table[1:], start=2):
        if len(row) != len(columns):
            raise ConfigError(f"{path} line {n} has {len(row)} values, not the header's {len(columns)}.")
        if row[0] in rows:
            raise ConfigError(f"{path} line {n} repeats the id {row[0]!r}: each id must appear once.")
        rows[row[0]] = dict(zip(columns[1:], row[1:], strict=True))
    if not rows:
        raise ConfigError(f"{path} has a header and no rows: list one row per id.")
    return SubmissionFormat(columns=columns, rows=rows)


def set_files(directory: Path) -> dict[str, Path]:
    """Every regular file under a record set's directory, by its path in it (links are not followed:
    what the organiser put there is what the entry reads)."""
    found: dict[str, Path] = {}
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file() and not path.is_symlink() and not any(p.is_symlink() for p in path.parents):
            found[PurePosixPath(path.relative_to(directory)).as_posix()] = path
    return found


def set_steps(directory: Path) -> tuple[str, ...]:
    """A stepped set's steps, in order (their names sorted); ConfigError when the set is not laid out in
    steps (anything beside steps/ would be seen at no step, or at every one: the organiser must say which)."""
    directory = Path(directory)
    top = directory / STEPS
    if not directory.is_dir():
        return ()
    beside = sorted(p.name for p in directory.iterdir() if p.name != STEPS)
    if beside or not top.is_dir() or top.is_symlink():
        raise ConfigError(f"{directory} is a stepped set ([submission] steps = true): it must hold only {STEPS}/, a "
                          "directory per step" + (f"; move {', '.join(beside[:3])} into the step that reveals it"
                                                  if beside else "") + ".")
    names = sorted(p.name for p in top.iterdir())
    bad = [n for n in names if not _STEP_RE.fullmatch(n) or not (top / n).is_dir() or (top / n).is_symlink()]
    if bad:
        raise ConfigError(f"{top / bad[0]} is not a step: each entry of {top} must be a directory named with letters, "
                          "digits, '.', '_' and '-' (at most 64, not starting with '.').")
    if not names:
        raise ConfigError(f"{top} holds no step: add a directory per step, such as {top}/001/.")
    if len(names) > STEPS_MAX or sum(len(n) + len(STEPS) + 2 for n in names) > STEP_NAMES_MAX:
        raise ConfigError(f"{top} has {len(names)} steps: at most {STEPS_MAX}, whose names take at most "
                          f"{STEP_NAMES_MAX:,} characters together (the guest names the steps so far in one mount "
                          "option): use fewer steps or shorter names.")
    return tuple(names)


def step_dir(directory: Path, step: str) -> Path:
    return Path(directory) / STEPS / step


def set_formats(directory: Path, rules: SubmissionRules) -> tuple[Path, ...]:
    """Where a set's submission formats are: its own, or each step's."""
    if not rules.steps:
        return (Path(directory) / rules.format,)
    return tuple(step_dir(directory, step) / rules.format for step in set_steps(directory))


def format_records(directory: Path, rules: SubmissionRules) -> tuple[str, ...]:
    """A record set's records: its format's ids, in order, a stepped set's its steps' in theirs (empty when a
    format is missing; `challenge add` insists on it). An id must be usable as a record's name, as RECORDS'
    are, and a stepped set's ids are each of one step."""
    if not rules.steps:
        return _format_ids(Path(directory) / rules.format)
    ids: dict[str, str] = {}
    for step in set_steps(directory):
        for i in _format_ids(step_dir(directory, step) / rules.format):
            if i in ids:
                raise ConfigError(f"{step_dir(directory, step) / rules.format} repeats the id {i!r} of step "
                                  f"{ids[i]}: each id is predicted at one step.")
            ids[i] = step
    return tuple(ids)


def _format_ids(path: Path) -> tuple[str, ...]:
    if not path.exists():
        return ()
    ids = read_format(path).ids
    bad = [i for i in ids if not RECORD_RE.fullmatch(i)]
    if bad:
        raise ConfigError(f"{path} has the id {bad[0]!r}, which vmjudge cannot use as a record's name: use letters, "
                          "digits, '_' and '-', at most 64 characters, starting with a letter or digit.")
    return ids
