"""One reason's row (its own module so the four lists can import it without the package)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Fault = Literal["refused", "entry", "infrastructure", "challenge"]


@dataclass(frozen=True)
class Reason:
    """`code`: the stable code reports, messages and `show --json` carry; `fault`: whose it is;
    `where`: when it can arise ("upload", "prep", "quiz", "exam", "score" or "any stage"); `means`:
    what happened, one sentence; `remedy`: what to do, one sentence, addressed to whoever acts
    (the participant for "refused" and "entry", the organiser for the other two)."""

    code: str
    fault: Fault
    where: str
    means: str
    remedy: str


@dataclass(frozen=True)
class Consequence:
    """What a fault means for the entry, the same for every reason of that fault."""

    title: str
    retried: str
    charged: str
    participant_sees: str
