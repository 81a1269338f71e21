"""docs/tutorial.md as its tests read it: the page's ```sh blocks in order, each with the ```text block
right after it (what the commands print on standard output), and the one normalisation the page itself
announces: a path in the home, a time and a duration printed as <HOME>, <TIME> and <SECONDS>. Kept apart
from the tests so that the host-only checks (test_tutorial_page.py) and the run in VMs (test_tutorial.py)
read the page the same way."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "tutorial.md"

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_SECONDS = re.compile(r"\b\d+(?:\.\d+)? s\b")


@dataclass(frozen=True)
class Step:
    commands: str  # an sh block, run by bash as it stands
    expected: str | None  # the text block right after it, or None where the page shows no output


def steps(text: str) -> list[Step]:
    """The page's sh blocks in order. A text block belongs to the sh block just before it (only blank
    lines between); one anywhere else is refused, as is a fence in another language, so that nothing the
    page shows as output goes unchecked."""
    found: list[Step] = []
    end = 0
    for fence in _FENCE.finditer(text):
        language, body = fence.group(1), fence.group(2)
        if language == "sh":
            found.append(Step(body, None))
        elif language == "text":
            if not found or found[-1].expected is not None or text[end:fence.start()].strip():
                raise ValueError(f"a text block not right after an sh block: {body[:60]!r}")
            found[-1] = Step(found[-1].commands, body)
        else:
            raise ValueError(f"a ```{language} block: the tutorial's blocks are sh (run) and text (compared)")
        end = fence.end()
    return found


def normalise(printed: str, home: Path) -> str:
    """What a command printed as the page writes it: the home's path as <HOME>, times and durations
    as <TIME> and <SECONDS>. Nothing else is changed, so any other difference fails."""
    printed = printed.replace(str(home), "<HOME>")
    return _SECONDS.sub("<SECONDS>", _TIME.sub("<TIME>", printed))


def difference(step: Step, printed: str, home: Path) -> str | None:
    """None when `printed` (a step's standard output) is what the page shows after it; else a message
    with both, for the test's failure."""
    if step.expected is None or normalise(printed, home) == step.expected:
        return None
    return (f"docs/tutorial.md shows after\n{step.commands}\nthis output:\n{step.expected}\n"
            f"but the commands printed (normalised):\n{normalise(printed, home)}")


def command_dir(where: Path) -> Path:
    """A directory holding `vmjudge`, this checkout's command line (not whatever is installed), for PATH."""
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "vmjudge"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m vmjudge.cli "$@"\n')
    wrapper.chmod(0o755)
    return bin_dir
