"""Tries to see the future, and says what it found: the check from inside that a step reads only the steps
so far. At each step it lists what data/ shows, then tries every way it knows to the later steps: the
CD's mount point and the directories the judge mounts, the CD and disk devices, the overlay's layers
named in /proc/self/mountinfo, and the last step's submission.csv. It prints one JSON line a step
(`peek: {...}`), and predicts from the latest configuration it could read, from the future if it found
any: finding none, it scores as the benchmark does."""

import csv
import glob
import json
import os
import sys
from pathlib import Path

DATA = Path("/code_execution/data")
SUBMISSION = Path("/code_execution/submission.csv")


def attempt(fn):
    try:
        return fn()
    except OSError as exc:
        return f"refused: {exc.strerror}"


def read_dev(dev):
    with open(dev, "rb") as f:
        return f"read {len(f.read(4096))} bytes"


def main(prediction_time):
    seen = sorted(p.stem for p in (DATA / "configs").glob("*.csv"))
    found = {"step": prediction_time, "argv": sys.argv[1:], "latest": seen[-1], "hours": len(seen),
             "previous_submission": SUBMISSION.exists(), "data_entries": sorted(os.listdir(DATA))}
    tries = {path: attempt(lambda p=path: sorted(os.listdir(p))) for path in
             ("/media", "/media/cdrom", "/media/cdrom/test", "/media/cdrom/training", "/home/entry/data")}
    tries.update({dev: attempt(lambda d=dev: read_dev(d)) for dev in
                  sorted(glob.glob("/dev/sr*") + glob.glob("/dev/vd*") + glob.glob("/dev/sd*"))})
    with open("/proc/self/mountinfo") as f:
        layers = [w for line in f if line.split()[4] == str(DATA) and " overlay " in line
                  for w in line.split() if "lowerdir=" in w]
    found["layers"] = layers
    future = []
    for where in ("/media/cdrom/test/steps", "/media/cdrom/training/steps"):
        listing = attempt(lambda w=where: sorted(os.listdir(w)))
        for step in listing if isinstance(listing, list) else []:
            if step > prediction_time:
                future += glob.glob(f"{where}/{step}/configs/*.csv")
    found["tries"], found["future_files"] = tries, len(future)
    print("peek: " + json.dumps(found, sort_keys=True), flush=True)
    latest = {}
    for path in sorted([str(p) for p in (DATA / "configs").glob("*.csv")] + future, key=lambda p: Path(p).name):
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
