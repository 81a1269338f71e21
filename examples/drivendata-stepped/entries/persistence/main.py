"""The benchmark: each airport keeps the configuration it was last seen in.

Run once per prediction time, as DrivenData's airport-configuration runtime runs `main.py PREDICTION_TIME`:
data/ holds the configurations up to that time and the time's submission format; the predictions go
in submission.csv beside this file.
"""

import csv
import sys
from pathlib import Path

DATA = Path("/code_execution/data")
SUBMISSION = Path("/code_execution/submission.csv")


def last_seen():
    """Each airport's configuration at the latest hour in data/configs."""
    latest = {}
    for path in sorted((DATA / "configs").glob("*.csv")):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                latest[row["airport"]] = row["config"]
    return latest


def main(prediction_time):
    print(f"predicting for {prediction_time}")
    latest = last_seen()
    with open(DATA / "submission_format.csv", newline="") as f:
        ids = [row["id"] for row in csv.DictReader(f)]
    with open(SUBMISSION, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "config"])
        for i in ids:
            out.writerow([i, latest[i.split("-", 1)[0]]])


if __name__ == "__main__":
    main(sys.argv[1])
