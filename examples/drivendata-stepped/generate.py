"""Make this example's synthetic data (stdlib only; the same bytes every run): `python generate.py`.

Runway configurations after DrivenData's Run-way Functions challenge (NASA, 2022), whose runtime reveals
the test data one prediction time at a time. Each airport's active configuration changes by the hour
as a Markov chain (it keeps its configuration seven hours in ten). A set is a day's prediction times,
one step each: the step reveals the configurations of the hours up to its time (the first step, the
morning's), and its submission format asks each airport's configuration an hour later, which the next
step reveals. Laid out as vmjudge's stepped sets: SET/steps/TIME/configs/HOUR.csv and
SET/steps/TIME/submission_format.csv.
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

AIRPORTS = {"katl": ("D_26L_A_26R", "D_8R_A_8L", "D_27R_A_28"), "kden": ("D_34L_A_35R", "D_17R_A_16L", "D_25_A_26"),
            "kjfk": ("D_31L_A_31R", "D_4L_A_4R", "D_13R_A_22L"), "ksea": ("D_34R_A_34L", "D_16L_A_16R")}
STAY = 0.7
# set -> (day, first prediction hour, steps): the public sample (the quiz), the hidden test set (the exam)
SETS = {"training": ("2022-06-01", 9, 3), "test": ("2022-06-08", 9, 6)}
HISTORY = 6  # hours of configurations the first step reveals, up to its time


def chain(rng: random.Random, hours: int) -> dict[str, list[str]]:
    """Each airport's configuration at each hour of a day."""
    made = {}
    for airport, configs in AIRPORTS.items():
        now = rng.choice(configs)
        seq = []
        for _ in range(hours):
            seq.append(now)
            if rng.random() >= STAY:
                now = rng.choice([c for c in configs if c != now])
        made[airport] = seq
    return made


def write(path: Path, header: list[str], lines: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(header)
        out.writerows(lines)


def stamp(day: str, hour: int) -> str:
    return f"{day}T{hour:02d}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = parser.parse_args().out
    rng = random.Random(2022)
    for subset, (day, first, steps) in SETS.items():
        configs = chain(rng, first + steps + 1)
        labels = []
        for k in range(steps):
            now = first + k
            step = out / subset / "steps" / stamp(day, now)
            for hour in range(first - HISTORY if k == 0 else now, now + 1):
                write(step / "configs" / f"{stamp(day, hour)}.csv", ["timestamp", "airport", "config"],
                      [[stamp(day, hour), a, configs[a][hour]] for a in AIRPORTS])
            ids = [f"{a}-{stamp(day, now + 1)}" for a in AIRPORTS]
            write(step / "submission_format.csv", ["id", "config"], [[i, "unknown"] for i in ids])
            labels += [[f"{a}-{stamp(day, now + 1)}", configs[a][now + 1]] for a in AIRPORTS]
        if subset == "test":  # the hidden labels: the scorer's REFERENCE.csv, never in a VM
            (out / "reference").mkdir(parents=True, exist_ok=True)
            (out / "reference" / "REFERENCE.csv").write_text("".join(f"{i},{c}\n" for i, c in labels))
        else:
            write(out / "public" / "train_labels.csv", ["id", "config"], labels)


if __name__ == "__main__":
    main()
