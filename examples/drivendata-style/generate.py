"""Make this example's synthetic data (stdlib only; the same bytes every run): `python generate.py`.

Narratives after DrivenData's Youth Mental Health Narratives challenge (2024): each row is a death
investigation's two narratives (NarrativeLE, NarrativeCME), and 23 variables to abstract from them,
21 binary and two categorical (InjuryLocationType 1-6, WeaponType1 1-12). Each positive variable puts
its own phrase in a narrative, so the `keywords` entry can find it; the rest is filler.
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

BINARY = ["DepressedMood", "MentalIllnessTreatmentCurrnt", "HistoryMentalIllnessTreatmnt", "SuicideAttemptHistory",
          "SuicideThoughtHistory", "SubstanceAbuseProblem", "MentalHealthProblem", "DiagnosisAnxiety",
          "DiagnosisDepressionDysthymia", "DiagnosisBipolar", "DiagnosisAdhd", "IntimatePartnerProblem",
          "FamilyRelationship", "Argument", "SchoolProblem", "RecentCriminalLegalProblem", "SuicideNote",
          "SuicideIntentDisclosed", "DisclosedToIntimatePartner", "DisclosedToOtherFamilyMember", "DisclosedToFriend"]
CATEGORICAL = {"InjuryLocationType": 6, "WeaponType1": 12}
COLUMNS = BINARY + list(CATEGORICAL)
FILLER = ["The V was found at home by a family member.", "Officers responded to the scene.",
          "The medical examiner was notified.", "No further information was available.",
          "The V was last seen the previous evening."]
SETS = {"training": ("s", 8), "test": ("t", 24)}  # the public sample (the quiz), the hidden test set (the exam)


def phrase(column: str, value: int | None = None) -> str:
    return f"[{column}{'' if value is None else f'={value}'}]"


def rows(prefix: str, n: int, rng: random.Random) -> list[tuple[str, dict[str, int], str, str]]:
    made = []
    for i in range(n):
        uid = f"{prefix}{i:03d}"
        labels = {c: int(rng.random() < 0.3) for c in BINARY}
        labels.update({c: rng.randint(1, k) for c, k in CATEGORICAL.items()})
        said = [phrase(c) for c in BINARY if labels[c] and rng.random() < 0.9]  # a few are never written down
        said += [phrase(c, labels[c]) for c in CATEGORICAL]
        rng.shuffle(said)
        half = len(said) // 2
        le = " ".join([rng.choice(FILLER), *said[:half], rng.choice(FILLER)])
        cme = " ".join([rng.choice(FILLER), *said[half:]])
        made.append((uid, labels, le, cme))
    return made


def write(path: Path, header: list[str], lines: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    out = parser.parse_args().out
    rng = random.Random(2024)
    for subset, (prefix, n) in SETS.items():
        made = rows(prefix, n, rng)
        write(out / subset / "test_features.csv", ["uid", "NarrativeLE", "NarrativeCME"],
              [[uid, le, cme] for uid, _, le, cme in made])
        write(out / subset / "submission_format.csv", ["uid", *COLUMNS], [[uid] + [0] * len(COLUMNS)
                                                                           for uid, *_ in made])
        labels = [[uid] + [lab[c] for c in COLUMNS] for uid, lab, *_ in made]
        if subset == "test":  # the test set's labels never enter a VM
            write(out / "reference" / "test_labels.csv", ["uid", *COLUMNS], labels)
        else:  # the sample's labels are the participants', with the sample itself
            write(out / "public" / "train_labels.csv", ["uid", *COLUMNS], labels)


if __name__ == "__main__":
    main()
