#!/usr/bin/env python3
"""Writes the af2017 example challenge from scratch: synthetic single-lead ECG records of four
rhythm classes, their labels and the sample entries (good, and one per failure case).

    python generate.py [--out DIR]      (DIR defaults to this file's directory)

Deletes and recreates DIR/training, DIR/test, DIR/reference and DIR/entries. Everything is
seeded, so running it again gives identical bytes. Needs numpy and wfdb on the host.
The good entry's answers.txt is produced by running its classify.py on the host; that is
safe because classify.py uses integer arithmetic only (see its docstring).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import wfdb

FS = 300
SECONDS = 15
GAIN = 1000  # ADC units per mV
# Labels: N normal rhythm, A atrial fibrillation, O other rhythm, ~ too noisy to classify.
# The O records are ventricular bigeminy ("O2") or trigeminy ("O3").
TRAINING = [("A0001", "N"), ("A0002", "A"), ("A0003", "O2"), ("A0004", "~"),
            ("A0005", "N"), ("A0006", "A"), ("A0007", "O3"), ("A0008", "N")]
TEST = [("B0001", "A"), ("B0002", "N"), ("B0003", "~"), ("B0004", "O2"),
        ("B0005", "A"), ("B0006", "N"), ("B0007", "O3"), ("B0008", "~")]
SEED = 2017
MIN_CORRECT = 6  # of the 8 test records

# (amplitude mV, offset from the R peak s, width s) of the Gaussian bumps making one beat.
P_WAVE = (0.15, -0.17, 0.025)
QRST = [(-0.10, -0.03, 0.010), (1.20, 0.0, 0.012), (-0.25, 0.03, 0.012), (0.30, 0.26, 0.050)]
PVC = [(1.50, 0.0, 0.030), (-0.45, 0.08, 0.030), (-0.40, 0.32, 0.060)]


def rhythm(rng: np.random.Generator, kind: str) -> tuple[list[float], list[bool]]:
    """Beat times (s) within [0.25 s, end - 0.25 s] and whether each beat is a PVC."""
    mean_rr = 60.0 / rng.uniform(80, 120) if kind == "A" else 60.0 / rng.uniform(58, 90)
    t = rng.uniform(0.3, 0.9) * mean_rr
    times, pvc = [], []
    k = 0
    while t < SECONDS - 0.25:
        times.append(t)
        rr = mean_rr * (1 + 0.04 * np.sin(2 * np.pi * t / 4.0)) * (1 + 0.02 * rng.standard_normal())
        if kind == "A":  # irregularly irregular
            rr = mean_rr * rng.uniform(0.6, 1.4)
        period = {"O2": 2, "O3": 3}.get(kind)
        is_pvc = period is not None and k % period == period - 1
        pvc.append(is_pvc)
        if period is not None and k % period == period - 2:
            rr *= 0.6  # the next beat is a premature ventricular beat ...
        elif is_pvc:
            rr *= 1.4  # ... followed by a compensatory pause
        t += rr
        k += 1
    return times, pvc


def synthesize(name: str, label: str) -> np.ndarray:
    rng = np.random.default_rng([SEED, int(name[1:]), ord(name[0])])
    times, pvc = rhythm(rng, label)
    n = FS * SECONDS
    t = np.arange(n) / FS
    x = np.zeros(n)
    scale = rng.uniform(0.8, 1.2) * (0.3 if label == "~" else 1.0)
    mean_rr = float(np.mean(np.diff(times)))
    for tb, is_pvc in zip(times, pvc, strict=True):
        waves = PVC if is_pvc else QRST + ([] if label == "A" else [P_WAVE])
        for amp, off, width in waves:
            if width == 0.050:  # the T wave comes later at slower rates
                off *= np.sqrt(mean_rr)
            x += scale * amp * np.exp(-0.5 * ((t - tb - off) / width) ** 2)
    if label == "A":  # fibrillatory waves instead of P waves
        for f in (rng.uniform(5, 6), rng.uniform(6.5, 8)):
            x += rng.uniform(0.03, 0.06) * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
    x += rng.uniform(0.1, 0.3) * np.sin(2 * np.pi * rng.uniform(0.15, 0.4) * t + rng.uniform(0, 2 * np.pi))
    x += 0.02 * np.sin(2 * np.pi * 50 * t + rng.uniform(0, 2 * np.pi))
    x += rng.uniform(0.02, 0.04) * rng.standard_normal(n)
    if label == "~":  # electrode motion and muscle noise swamp the ECG
        x += rng.uniform(0.3, 0.45) * rng.standard_normal(n)
        walk = np.cumsum(rng.standard_normal(n))
        x += 0.8 * (walk - walk.mean()) / (walk.std() + 1e-9)
    return np.clip(np.round(x * GAIN), -32767, 32767).astype(np.int16)


def write_record(directory: Path, name: str, digital: np.ndarray) -> None:
    wfdb.wrsamp(name, fs=FS, units=["mV"], sig_name=["ECG"], d_signal=digital.reshape(-1, 1), fmt=["16"],
                adc_gain=[GAIN], baseline=[0], write_dir=str(directory))


def write_text(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    os.chmod(path, mode)


# ---------------------------------------------------------------- the sample entries' files

AUTHORS = "vmjudge example entry for af2017 (synthetic data). Author: the vmjudge project.\n"

LICENSE = """This sample entry was written for vmjudge's af2017 example challenge.
To the extent possible under law, its authors waive all copyright and related rights in it
(CC0 1.0 Universal: https://creativecommons.org/publicdomain/zero/1.0/).
"""

SETUP_SH = """#!/bin/sh
# Runs once in the guest, in the entry's home directory, before any record.
echo "af2017 sample entry: checking python3 and numpy"
python3 -c "import numpy" || exit 1
"""

NEXT_SH = """#!/bin/sh
# Runs once per record: $1 is the record name; its files ($1.hea, $1.dat) are here.
# Appends the line "$1,LABEL" to answers.txt (LABEL: N, A, O or ~).
python3 classify.py "$1"
"""

CLASSIFY_PY = '''"""af2017 sample entry: rhythm classification using integer arithmetic only.

    python3 classify.py RECORD    reads RECORD.hea and its format-16 signal file, appends
                                  the line "RECORD,LABEL" to answers.txt, prints nothing

Labels: N normal rhythm, A atrial fibrillation, O other rhythm, ~ too noisy.
Every value that decides anything is an integer (numpy int64 or Python int), so the answer
is the same on any machine and with any numpy version: the judge compares the training-set
answers made in its VM with the answers.txt submitted with the entry.
Method: a noise measure (mean absolute second difference, in microvolts); beats found as in
Pan and Tompkins (moving sum, derivative, square, 150 ms integration, adaptive threshold);
then RR irregularity at lags 1, 2 and 3, in thousandths of the mean RR interval: regular is
N; irregular but regular at lag 2 or 3 (bigeminy, trigeminy) is O; irregular at every lag is A.
"""

import sys
from fractions import Fraction

import numpy as np

NOISE_UV = 250     # mean |second difference| above this: "~"
REGULAR = 100      # lag-1 RR irregularity (per mille) below this: "N"
PATTERN = 3        # lag-1 irregularity over PATTERN x that at lag 2 or 3: "O"


def read_record(name):
    """First signal of a WFDB record in format 16 -> (int64 samples minus baseline, fs, gain)."""
    with open(name + ".hea") as f:
        lines = [ln.split() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    fs = int(Fraction(lines[0][2].split("/")[0].split("(")[0])) if len(lines[0]) > 2 else 250
    fields = lines[1]
    fname, fmt = fields[0], fields[1]
    if fmt.split("x")[0].split(":")[0].split("+")[0] != "16":
        sys.exit(f"classify.py: only signal format 16 is supported, not {fmt}")
    gain = Fraction(fields[2].split("(")[0].split("/")[0]) if len(fields) > 2 else Fraction(200)
    if gain == 0:
        gain = Fraction(200)
    zero = int(fields[4]) if len(fields) > 4 else 0
    baseline = zero
    if len(fields) > 2 and "(" in fields[2]:
        baseline = int(fields[2].split("(")[1].split(")")[0])
    same_file = sum(1 for sig in lines[1:] if sig[0] == fname)
    data = np.fromfile(fname, dtype="<i2")
    data = data[: len(data) // same_file * same_file].reshape(-1, same_file)[:, 0]
    return data.astype(np.int64) - baseline, fs, gain


def moving_sum(x, n):
    """out[i] = x[i-n+1] + ... + x[i] (zeros before the start)."""
    c = np.cumsum(np.concatenate((np.zeros(n, np.int64), x)))
    return c[n:] - c[:-n]


def centred_sum(x, half):
    """out[i] = x[i-half] + ... + x[i+half], the ends repeated outward."""
    padded = np.concatenate((np.full(half, x[0]), x, np.full(half, x[-1])))
    return moving_sum(padded, 2 * half + 1)[2 * half:]


def detect(x, fs):
    """Sample numbers of the detected R peaks, increasing."""
    n = len(x)
    if n < 8:
        return []
    l1 = max(1, fs // 50)
    lp = moving_sum(x, l1)
    d = np.zeros(n, np.int64)
    d[4:] = 2 * lp[4:] + lp[3:-1] - lp[1:-3] - 2 * lp[:-4]
    w = max(1, fs * 150 // 1000)
    mwi = moving_sum(d * d, w)
    inner = mwi[1:-1]
    candidates = (np.nonzero((inner > mwi[:-2]) & (inner >= mwi[2:]))[0] + 1).tolist()
    refractory = fs * 200 // 1000
    learn = min(n, 2 * fs)
    signal_peak = int(mwi[:learn].max()) // 3
    noise_peak = int(mwi[:learn].sum()) // (2 * learn)
    threshold = noise_peak + (signal_peak - noise_peak) // 4
    peaks = []
    for p in candidates:
        v = int(mwi[p])
        if v > threshold:
            if not peaks or p - peaks[-1] > refractory:
                peaks.append(p)
                signal_peak = (v + 7 * signal_peak) // 8
            elif v > int(mwi[peaks[-1]]):
                peaks[-1] = p
        else:
            noise_peak = (v + 7 * noise_peak) // 8
        threshold = noise_peak + (signal_peak - noise_peak) // 4
    half = fs // 8
    deviation = np.abs(x * (2 * half + 1) - centred_sum(x, half))
    beats = []
    for p in peaks:
        lo, hi = max(0, p - w - l1 - 4), min(n, p + 1)
        r = lo + int(np.argmax(deviation[lo:hi]))
        if not beats or r - beats[-1] > refractory // 2:
            beats.append(r)
    return beats


def noise_microvolts(x, gain):
    """Mean absolute second difference of the signal, in microvolts (rounded down)."""
    total = int(np.abs(x[2:] - 2 * x[1:-1] + x[:-2]).sum())
    count = max(1, len(x) - 2)
    return (total * 1000 * gain.denominator) // (count * gain.numerator)


def irregularity(rr, lag):
    """Mean |RR[i] - RR[i-lag]| in thousandths of the mean RR interval."""
    diffs = [abs(rr[i] - rr[i - lag]) for i in range(lag, len(rr))]
    if not diffs:
        return 1000
    return sum(diffs) * 1000 * len(rr) // (len(diffs) * sum(rr))


def classify(x, fs, gain):
    if noise_microvolts(x, gain) > NOISE_UV:
        return "~"
    beats = detect(x, fs)
    if len(beats) < 6:
        return "~"
    rr = [b - a for a, b in zip(beats, beats[1:], strict=False)]
    lag1 = irregularity(rr, 1)
    if lag1 < REGULAR:
        return "N"
    if PATTERN * min(irregularity(rr, 2), irregularity(rr, 3)) < lag1:
        return "O"
    return "A"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 classify.py RECORD")
    record = sys.argv[1]
    label = classify(*read_record(record))
    with open("answers.txt", "a") as f:
        f.write(f"{record},{label}\\n")


if __name__ == "__main__":
    main()
'''

# Failure cases: each is the good entry with one change.
SETUP_ERROR_SH = """#!/bin/sh
# Fails on purpose: stage 1 must stop and report this output.
echo "cannot build"
exit 1
"""

QUIZ_TIMEOUT_SH = """#!/bin/sh
# Hangs on purpose on training record A0002: the per-record limit must stop stage 2 there.
if [ "$1" = A0002 ]; then
    sleep 1000
fi
python3 classify.py "$1"
"""

EXAM_ERRORS_SH = """#!/bin/sh
# Fails on purpose on test records B0002 and B0005 (training records are named A...). Stage 3
# must count the failures, never show this output, and still score the entry (those two
# records count as missing answers).
case "$1" in
B0002|B0005)
    echo "SECRET-TEST-OUTPUT $1"
    exit 3
    ;;
esac
python3 classify.py "$1"
"""

EXAM_OVER_CAP_SH = """#!/bin/sh
# Slow on purpose on every test record (any record not named A..., like the training
# records): 8 x 14 s exceeds the 60 s stage-3 cap, so no score.
case "$1" in
A*) ;;
*) sleep 14 ;;
esac
python3 classify.py "$1"
"""

WRONG = {"N": "A", "A": "N", "O": "N", "~": "N"}


def run_classifier(entry: Path, records: list[str], source: Path) -> str:
    """Runs the entry's classify.py on the host for each record in order, as next.sh would,
    starting with no answers.txt; returns the answers.txt it leaves."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(entry / "classify.py", work / "classify.py")
        for r in records:
            for ext in ("hea", "dat"):
                shutil.copy(source / f"{r}.{ext}", work / f"{r}.{ext}")
            done = subprocess.run([sys.executable, "classify.py", r], cwd=work, check=True,
                                  capture_output=True)
            assert done.stdout == b"" and done.stderr == b"", (r, done)
        return (work / "answers.txt").read_text()


def parse(text: str) -> dict[str, str]:
    return dict(line.split(",", 1) for line in text.splitlines())


def write_entries(entries: Path, training: Path) -> None:
    good = entries / "good"
    write_text(good / "AUTHORS.txt", AUTHORS)
    write_text(good / "LICENSE.txt", LICENSE)
    write_text(good / "setup.sh", SETUP_SH, 0o755)
    write_text(good / "next.sh", NEXT_SH, 0o755)
    write_text(good / "classify.py", CLASSIFY_PY)
    answers = run_classifier(good, [r for r, _ in TRAINING], training)
    assert list(parse(answers)) == [r for r, _ in TRAINING]
    write_text(good / "answers.txt", answers)

    def variant(case: str) -> Path:
        path = entries / case
        shutil.copytree(good, path)
        return path

    os.remove(variant("missing-file") / "next.sh")
    write_text(variant("setup-error") / "setup.sh", SETUP_ERROR_SH, 0o755)
    lines = answers.splitlines(keepends=True)
    record, label = lines[2].strip().split(",")  # A0003
    lines[2] = f"{record},{WRONG[label]}\n"
    write_text(variant("quiz-mismatch") / "answers.txt", "".join(lines))
    write_text(variant("quiz-timeout") / "next.sh", QUIZ_TIMEOUT_SH, 0o755)
    write_text(variant("dryrun") / "DRYRUN", "")
    write_text(variant("exam-errors") / "next.sh", EXAM_ERRORS_SH, 0o755)
    write_text(variant("exam-over-cap") / "next.sh", EXAM_OVER_CAP_SH, 0o755)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = parser.parse_args().out
    for sub in ("training", "test", "reference", "entries"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)
    for records, directory, labels in ((TRAINING, out / "training", out / "training" / "REFERENCE.csv"),
                                       (TEST, out / "test", out / "reference" / "REFERENCE.csv")):
        for r, kind in records:
            write_record(directory, r, synthesize(r, kind))
        write_text(directory / "RECORDS", "".join(f"{r}\n" for r, _ in records))
        # Training labels go with the training set (participants have them); test labels only
        # to reference/, which never enters a VM.
        write_text(labels, "".join(f"{r},{kind[0]}\n" for r, kind in records))
    for path in out.glob("*/*.*"):
        os.chmod(path, 0o644)
    write_entries(out / "entries", out / "training")

    # Keep the example meaningful: the good entry must classify the test records well.
    truth = parse((out / "reference" / "REFERENCE.csv").read_text())
    given = parse(run_classifier(out / "entries" / "good", [r for r, _ in TEST], out / "test"))
    correct = sum(given[r] == truth[r] for r in truth)
    train_truth = parse((out / "training" / "REFERENCE.csv").read_text())
    train_given = parse((out / "entries" / "good" / "answers.txt").read_text())
    train_correct = sum(train_given[r] == train_truth[r] for r in train_truth)
    print(f"af2017 good entry: test set {correct}/{len(truth)} correct "
          f"({' '.join(f'{r}:{truth[r]}->{given[r]}' for r in truth)}); "
          f"training set {train_correct}/{len(train_truth)}")
    assert correct >= MIN_CORRECT, "the good entry no longer classifies the test records well"


if __name__ == "__main__":
    main()
