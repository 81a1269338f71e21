"""challenge.toml's [[phase]] tables: a contest run in phases inside one challenge.

Real contests run in phases, as HECKTOR 2025 did on Grand Challenge: a sanity check on a few
cases that every team must pass, a validation phase with a public board from which the best
teams proceed, and a test phase in which each team chooses one of its validation entries and
hears nothing but whether it failed until the results are published. Each phase has its own
test set and reference, its window, its limits per owner, whether it takes new uploads or
entries carried from a named earlier phase, who may enter it (everyone, or the owners the
organisers promoted from the phase before), and what participants are told before its results
are published (`feedback`, and whether its board is shown). The VM is the challenge's; [limits]
are too, unless a phase's own [phase.limits] table says otherwise. A phase may also have a
training set (`training`) and an image ([phase.image], keys over the image it would otherwise
have) of its own; one that does not say has those of the phase it carries entries from, else
the challenge's, so a carried entry runs where it passed. A carried entry's archive is the one
uploaded, with answers for the training set of the phase it was uploaded to: a phase that
carries entries may therefore not name a training set other than its source's (the organiser
who wants one lets the phase take uploads instead).

A challenge without [[phase]] has no phases, and everything behaves as before.
"""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .entry import RELPATH_RE, EntryRules
from .image import ImageRecipe, image_recipe
from .limits import StageLimits, stage_limits
from .records import read_records
from .values import Section

FEEDBACK = ("full", "errors", "none")
BOARDS = ("public", "hidden")
ENTRANTS = ("all", "promoted")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_COUNT = "a whole number from 1 to 1000000, or leave the key out for no limit"


def utc(seconds: float) -> str:
    """A phase's time as the queue writes times (UTC, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True)
class Phase:
    """One phase of a contest. `carry` names the earlier phase its entries come from (None: it
    takes uploads); `entrants` is "promoted" when only owners promoted from the phase before
    may enter. `feedback` is what participants hear of its entries before the phase is
    published: "full" (the report), "errors" (the verdict, and for a failure its stage and
    reason), "none"; `board` whether its leaderboard is shown before then. The three limits
    count one owner's entries on one board of the phase: scored (or still able to be, as
    [entry] max_scored_per_owner), submitted (every entry accepted, uploaded or carried,
    whatever became of it) and working (entries that passed the phase). `training_dir` and
    `training` are the training set its quiz runs on, `image` the recipe of the image its VM
    stages run in (each its own, its source phase's, or the challenge's)."""

    name: str
    position: int  # its place among the challenge's phases, from 0
    test: tuple[str, ...]
    test_dir: Path
    reference_dir: Path
    opens: float | None = None  # epoch seconds; None: open from the start
    closes: float | None = None  # epoch seconds; None: never closes
    carry: str | None = None
    entrants: str = "all"
    feedback: str = "full"
    board: str = "public"
    max_scored_per_owner: int | None = None
    max_submitted_per_owner: int | None = None
    max_working_per_owner: int | None = None
    limits: StageLimits = StageLimits()
    training_dir: Path = Path("training")
    training: tuple[str, ...] = ()
    image: ImageRecipe = ImageRecipe()

    @property
    def uploads(self) -> bool:
        return self.carry is None

    @property
    def hidden(self) -> bool:
        """Whether participants see less than everything of it until the organiser publishes it."""
        return self.feedback != "full" or self.board == "hidden"

    @property
    def keeps_exam_time_back(self) -> bool:
        """Its entries' outcomes wait for the exam's cap (queue/publish.py): with scores and the
        exam's time kept back, the moment an outcome appeared would still give that time away."""
        return self.feedback != "full"

    def has_opened(self, at: float) -> bool:
        return self.opens is None or at >= self.opens

    def has_closed(self, at: float) -> bool:
        return self.closes is not None and at >= self.closes

    def is_open(self, at: float) -> bool:
        return self.has_opened(at) and not self.has_closed(at)

    def window(self) -> str:
        """The window in words, as refusals and `vmjudge phases` say it."""
        opens = f"from {utc(self.opens)}" if self.opens is not None else "from the start"
        closes = f"until {utc(self.closes)}" if self.closes is not None else "with no closing time"
        return f"{opens} {closes}"


def _time(sec: Section, key: str) -> float | None:
    """A TOML offset date-time (2025-08-10T23:59:00Z): a time without its offset would be read
    in whichever zone the judge's host happens to be in."""
    if key not in sec.data:
        return None
    value = sec.data.pop(key)
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        raise ConfigError(f"{sec.source}: [{sec.table}] {key} = {value!s} is not allowed: use a date and time "
                          "with its offset, unquoted, such as 2025-08-10T23:59:00Z.")
    return value.timestamp()


def _inside(source: str, table: str, key: str, directory: Path, value: str) -> Path:
    path = (directory / value).resolve()
    if not RELPATH_RE.fullmatch(value) or not path.is_relative_to(directory):
        raise ConfigError(f"{source}: [{table}] {key} = {value!r} is not allowed: use a directory inside the "
                          f"challenge's, such as \"phases/test/{key}\".")
    return path


@dataclass(frozen=True)
class Shared:
    """What every phase has of the challenge's unless it says otherwise."""

    limits: StageLimits
    entry: EntryRules
    training_dir: Path
    image: ImageRecipe


def _training(sec: Section, directory: Path, name: str, source: Phase | None, shared: Shared) -> Path:
    """The phase's training directory: its own, else its source phase's, else the challenge's. A
    carried entry's archive holds answers for its source phase's training set alone, so a
    phase that carries may name no other."""
    if "training" not in sec.data:
        return source.training_dir if source is not None else shared.training_dir
    written = sec.data["training"]
    path = _inside(sec.source, sec.table, "training", directory, sec.get("training", str, None))
    if source is not None and path != source.training_dir.resolve():
        raise ConfigError(f"{sec.source}: [{sec.table}] training = {written!r} is not allowed: phase {name} takes "
                          f"entries carried from phase {source.name}, whose archives hold answers for the training "
                          f"set in {source.training_dir.relative_to(directory)}/ only; leave training out (a carried "
                          "entry is quizzed on the training set of the phase it comes from), or let the phase take "
                          "uploads (no carry), so that its entries come with answers for a training set of its own.")
    return path


def _phase(source: str, directory: Path, data: Any, position: int, earlier: list[Phase], shared: Shared) -> Phase:
    sec = Section(source, f"phase {position + 1}", data)
    name = sec.get("name", str, None, lambda v: bool(_NAME_RE.fullmatch(v)),
                   "lower-case letters, digits, '_' and '-', at most 32 characters")
    if name is None:
        raise ConfigError(f"{source}: the [[phase]] table number {position + 1} has no name: add a line such as "
                          "name = \"validation\".")
    sec.table = table = f"phase {name}"
    if any(p.name == name for p in earlier):
        raise ConfigError(f"{source}: two [[phase]] tables are named {name!r}: give each phase a name of its own.")
    names = ", ".join(p.name for p in earlier) or "none: the first phase takes uploads"
    carry = sec.get("carry", str, None, lambda v: any(p.name == v for p in earlier),
                    f"the name of an earlier phase (here {names})")
    feedback = sec.get("feedback", str, "full", lambda v: v in FEEDBACK, " or ".join(f'"{f}"' for f in FEEDBACK))
    board = sec.get("board", str, "public" if feedback == "full" else "hidden", lambda v: v in BOARDS,
                    " or ".join(f'"{b}"' for b in BOARDS))
    if board == "public" and feedback != "full":
        raise ConfigError(f"{source}: [{table}] board = \"public\" would show the scores that feedback = "
                          f"\"{feedback}\" keeps back until the phase is published: leave board out, or set it to "
                          "\"hidden\".")
    entrants = sec.get("entrants", str, "all", lambda v: v in ENTRANTS and (v == "all" or bool(earlier)),
                       "\"all\", or \"promoted\" on a phase after the first (owners are promoted from the board "
                       "of the phase before)")
    test_dir = _inside(source, table, "test", directory, sec.get("test", str, f"phases/{name}/test"))
    reference_dir = _inside(source, table, "reference", directory,
                            sec.get("reference", str, f"phases/{name}/reference"))
    carried_from = next((p for p in earlier if p.name == carry), None)
    training_dir = _training(sec, directory, name, carried_from, shared)
    image = image_recipe(source, directory, f"{table}.image", sec.data.pop("image", {}),
                         carried_from.image if carried_from is not None else shared.image)
    opens, closes = _time(sec, "opens"), _time(sec, "closes")
    if opens is not None and closes is not None and closes <= opens:
        raise ConfigError(f"{source}: [{table}] closes at {utc(closes)}, not after it opens at {utc(opens)}: give "
                          "a closing time after the opening time.")
    phase = Phase(
        name=name, position=position, test=read_records(test_dir), test_dir=test_dir, reference_dir=reference_dir,
        opens=opens, closes=closes, carry=carry, entrants=entrants, feedback=feedback, board=board,
        max_scored_per_owner=sec.get("max_scored_per_owner", int, shared.entry.max_scored_per_owner,
                                     lambda v: 1 <= v <= 10**6, _COUNT),
        max_submitted_per_owner=sec.get("max_submitted_per_owner", int, None, lambda v: 1 <= v <= 10**6, _COUNT),
        max_working_per_owner=sec.get("max_working_per_owner", int, None, lambda v: 1 <= v <= 10**6, _COUNT),
        limits=stage_limits(source, f"{table}.limits", sec.data.pop("limits", {}), shared.limits),
        training_dir=training_dir, training=read_records(training_dir), image=image)
    sec.done()
    return phase


def read_phases(source: str, directory: Path, data: dict[str, Any], shared: Shared) -> tuple[Phase, ...]:
    """The [[phase]] tables in their order (a contest's order); () when there are none."""
    tables = data.get("phase")
    if tables is None:
        return ()
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{source}: phase must be one or more [[phase]] tables (two brackets), each with its "
                          "name: write [[phase]] above each phase's keys.")
    phases: list[Phase] = []
    for position, table in enumerate(tables):
        phases.append(_phase(source, directory, table, position, phases, shared))
    return tuple(phases)
