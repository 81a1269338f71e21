"""The four stages of an evaluation, in order: the one table the queue, the reports, the
daemon and the replica read the stage order from.

    1 prep   check the components, install the entry, run setup.sh     (VM)
    2 quiz   next.sh per training record must reproduce the submission  (VM)
      DRYRUN ends the evaluation here
    3 exam   next.sh per test record, silently, under the stage's cap   (VM)
    4 score  compare stage 3's results with the reference answers       (host)

The table sits below every other layer, so each stage's function is named here rather than
imported: the queue, which the stages themselves use, can know the order without the
stages. The supervisor (and the replica) import a stage's function when they run it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stage:
    number: int
    name: str
    function: str  # "module:function" taking a StageContext and giving a StageOutcome
    in_vm: bool  # False: on the host only, no image and no VM
    # The hidden test set's stage: from its start until the publish time (queue/publish.py)
    # participants see nothing of it or of any stage after it.
    silent: bool = False

    @property
    def title(self) -> str:
        return f"Stage {self.number} ({self.name})"

    def load(self) -> Callable[[Any], Any]:
        """The stage's function, imported now (as an entry point is)."""
        module, _, name = self.function.partition(":")
        return getattr(importlib.import_module(module), name)


PIPELINE = (
    Stage(1, "prep", "vmjudge.stages.prep.stage:run", in_vm=True),
    Stage(2, "quiz", "vmjudge.stages.quiz.stage:run", in_vm=True),
    Stage(3, "exam", "vmjudge.stages.exam.stage:run", in_vm=True, silent=True),
    Stage(4, "score", "vmjudge.stages.score.stage:run", in_vm=False),
)
STAGE_NAMES = tuple(s.name for s in PIPELINE)
FIRST = PIPELINE[0].name
VM_STAGES = tuple(s.name for s in PIPELINE if s.in_vm)  # those that boot a VM, use its VM time and write a log
SILENT = next(s.name for s in PIPELINE if s.silent)
# What participants see nothing of until the publish time: the silent stage and every one after it.
UNPUBLISHED = STAGE_NAMES[STAGE_NAMES.index(SILENT):]
# Those that run on the post-setup home disk, which stays on the host that ran the first.
HOME_STAGES = tuple(name for name in VM_STAGES if name != FIRST)


def by_name(name: str) -> Stage:
    for s in PIPELINE:
        if s.name == name:
            return s
    raise KeyError(f"no stage named {name!r}")


def next_stage(name: str) -> str | None:
    """The stage after `name`, None after the last."""
    i = STAGE_NAMES.index(name)
    return STAGE_NAMES[i + 1] if i + 1 < len(STAGE_NAMES) else None
