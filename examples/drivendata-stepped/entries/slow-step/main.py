"""The benchmark, but its fifth step (counted in a file it keeps beside itself: what a run leaves in the
code directory stays for its later steps) sleeps past the step's cap. The sample has three steps, so it
passes the quiz; in the exam, that step times out and its rows go unanswered."""

import csv
import sys
import time
from pathlib import Path

DATA = Path("/code_execution/data")
SUBMISSION = Path("/code_execution/submission.csv")
COUNT = Path("/code_execution/steps_run.txt")


def main(prediction_time):
    done = int(COUNT.read_text()) if COUNT.exists() else 0
    COUNT.write_text(str(done + 1))
    print(f"step {done + 1}: {prediction_time}")
    if done + 1 == 5:
        time.sleep(600)
    latest = {}
    for path in sorted((DATA / "configs").glob("*.csv")):
        with open(path, newline="") as f:
            latest.update({row["airport"]: row["config"] for row in csv.DictReader(f)})
    with open(DATA / "submission_format.csv", newline="") as f:
        ids = [row["id"] for row in csv.DictReader(f)]
    with open(SUBMISSION, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "config"])
        out.writerows([i, latest[i.split("-", 1)[0]]] for i in ids)


if __name__ == "__main__":
    main(sys.argv[1])
