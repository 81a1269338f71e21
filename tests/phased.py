"""A three-phase contest built on the hostile corpus's small challenge (tests/hostile/challenge:
answer-lines, each record's answer the number in RECORD.txt, scored by accuracy), HECKTOR's
shape cut to its bones: a sanity check that takes uploads, a validation phase that takes the
entries that passed it, and a test phase that only promoted owners enter, each carrying one
validation entry, told only of errors until the organiser publishes it.

The host tests (test_phases*.py) and the VM test (test_phases_vm.py) share it, so both judge
the same contest.
"""

from __future__ import annotations

import shutil
from pathlib import Path

QUICK = Path(__file__).resolve().parent / "hostile" / "challenge"

# Each phase's test set: record -> (the number in its file, the reference answer). The corpus's
# good entry answers the number, so it is right where the two agree: 1, 3/4 and 5/8.
SETS = {
    "sanity": {"s1": (1, 1), "s2": (2, 2)},
    "validation": {"v1": (1, 1), "v2": (2, 2), "v3": (3, 3), "v4": (4, 0)},
    "test": {f"t{i}": (i, 0 if i in (2, 5, 7) else i) for i in range(1, 9)},
}


def accuracy(phase: str, answers: dict[str, str]) -> float:
    """The score the accuracy scorer gives `answers` on the phase's reference, computed here."""
    records = SETS[phase]
    return sum(1 for r, (_, right) in records.items() if answers.get(r) == str(right)) / len(records)

PHASES = """
[[phase]]
name = "sanity"
feedback = "full"
{sanity}

[[phase]]
name = "validation"
carry = "sanity"
max_working_per_owner = 2
{validation}

[[phase]]
name = "test"
carry = "validation"
entrants = "promoted"
feedback = "errors"
max_submitted_per_owner = 1
{test}
"""


def contest_toml(name: str = "contest", sanity: str = "", validation: str = "", test: str = "") -> str:
    """The small challenge's challenge.toml under `name`, with the three phases; each phase's
    extra lines (its window, limits) given as text."""
    base = (QUICK / "challenge.toml").read_text().replace('name = "hostile"', f'name = "{name}"')
    return base + PHASES.format(sanity=sanity, validation=validation, test=test)


def write_sets(directory: Path, sets: dict[str, dict[str, tuple[int, int]]] = SETS) -> None:
    for phase, records in sets.items():
        test, reference = directory / "phases" / phase / "test", directory / "phases" / phase / "reference"
        test.mkdir(parents=True, exist_ok=True)
        reference.mkdir(parents=True, exist_ok=True)
        (test / "RECORDS").write_text("".join(f"{r}\n" for r in records))
        for record, (number, _) in records.items():
            (test / f"{record}.txt").write_text(f"{number}\n")
        (reference / "REFERENCE.csv").write_text("".join(f"{r},{answer}\n" for r, (_, answer) in records.items()))


def contest_dir(root: Path, name: str = "contest", **windows: str) -> Path:
    """A copy of the small challenge with its own test/ and reference/ removed (a phased
    challenge needs neither) and the three phases' sets in their place."""
    directory = root / name
    shutil.copytree(QUICK, directory)
    shutil.rmtree(directory / "test")
    shutil.rmtree(directory / "reference")
    write_sets(directory)
    (directory / "challenge.toml").write_text(contest_toml(name, **windows))
    return directory


def write_training(directory: Path, where: str, records: dict[str, int]) -> Path:
    """A training set of its own at `where` in the challenge: RECORDS and RECORD.txt with the
    number the corpus's good entry answers."""
    training = directory / where
    training.mkdir(parents=True, exist_ok=True)
    (training / "RECORDS").write_text("".join(f"{r}\n" for r in records))
    for record, number in records.items():
        (training / f"{record}.txt").write_text(f"{number}\n")
    return training
