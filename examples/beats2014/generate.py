#!/usr/bin/env python3
"""Writes the beats2014 example challenge from scratch: synthetic ECG records, reference
beat annotations and the sample entries (good, and one per failure case).

    python generate.py [--out DIR]      (DIR defaults to this file's directory)

Deletes and recreates DIR/training, DIR/test, DIR/reference and DIR/entries. Everything is
seeded, so running it again gives identical bytes. Needs numpy and wfdb on the host.
The good entry's outputs/ are produced by running its detect.py on the host; that is
safe because detect.py uses integer arithmetic only (see its docstring).
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

FS = 250
SECONDS = 20
GAIN = 1000  # ADC units per mV
TRAINING = ["100", "101", "102", "103", "104"]
TEST = ["200", "201", "202", "203", "204", "205"]
# Per record: mean heart rate (bpm), amplitude scale, ectopic (PVC) beats or not, noise (mV rms).
PLAN = {
    "100": (62, 1.00, False, 0.02), "101": (78, 0.85, False, 0.03), "102": (96, 1.20, False, 0.03),
    "103": (70, 1.00, True, 0.03), "104": (115, 0.90, False, 0.04),
    "200": (55, 1.10, False, 0.02), "201": (72, 0.80, False, 0.04), "202": (88, 1.00, False, 0.03),
    "203": (66, 0.95, True, 0.03), "204": (104, 1.15, False, 0.05), "205": (120, 0.90, False, 0.03),
}
SEED = 2014
MATCH_WINDOW = FS * 150 // 1000  # samples; a detection within 150 ms (inclusive) of a beat matches it
MIN_SE_PP = 0.9

# (amplitude mV, offset from the R peak s, width s) of the Gaussian bumps making one beat.
SINUS = [(0.15, -0.17, 0.025), (-0.10, -0.03, 0.010), (1.20, 0.0, 0.012), (-0.25, 0.03, 0.012),
         (0.30, 0.26, 0.050)]
PVC = [(1.50, 0.0, 0.030), (-0.45, 0.08, 0.030), (-0.40, 0.32, 0.060)]


def rr_series(rng: np.random.Generator, bpm: int, ectopic: bool) -> tuple[list[int], list[bool]]:
    """R-peak sample positions and whether each beat is a PVC, all within [0.25 s, end - 0.25 s]."""
    n = FS * SECONDS
    mean_rr = 60.0 / bpm
    t = rng.uniform(0.3, 0.9) * mean_rr
    beats, pvc = [], []
    next_pvc = int(rng.integers(5, 9))
    while t < SECONDS - 0.25:
        beats.append(int(round(t * FS)))
        pvc.append(False)
        rr = mean_rr * (1 + 0.05 * np.sin(2 * np.pi * t / 4.0)) * (1 + 0.02 * rng.standard_normal())
        if ectopic and len(beats) == next_pvc:
            # A premature ventricular beat, then a compensatory pause.
            tp = t + 0.6 * rr
            if tp < SECONDS - 0.25:
                beats.append(int(round(tp * FS)))
                pvc.append(True)
            next_pvc += int(rng.integers(5, 9))
            rr *= 2.0
        t += rr
    assert all(b < n for b in beats) and beats == sorted(beats)
    return beats, pvc


def synthesize(name: str) -> tuple[np.ndarray, list[int]]:
    bpm, scale, ectopic, noise = PLAN[name]
    rng = np.random.default_rng([SEED, int(name)])
    beats, pvc = rr_series(rng, bpm, ectopic)
    n = FS * SECONDS
    t = np.arange(n) / FS
    x = np.zeros(n)
    mean_rr = 60.0 / bpm
    for b, is_pvc in zip(beats, pvc, strict=True):
        tb = b / FS
        for amp, off, width in (PVC if is_pvc else SINUS):
            if width == 0.050:  # the T wave comes later at slower rates
                off *= np.sqrt(mean_rr)
            x += scale * amp * np.exp(-0.5 * ((t - tb - off) / width) ** 2)
    x += rng.uniform(0.1, 0.3) * np.sin(2 * np.pi * rng.uniform(0.15, 0.4) * t + rng.uniform(0, 2 * np.pi))
    x += 0.02 * np.sin(2 * np.pi * 50 * t + rng.uniform(0, 2 * np.pi))
    x += noise * rng.standard_normal(n)
    digital = np.clip(np.round(x * GAIN), -32767, 32767).astype(np.int16)
    return digital, beats


def write_record(directory: Path, name: str, digital: np.ndarray) -> None:
    wfdb.wrsamp(name, fs=FS, units=["mV"], sig_name=["ECG"], d_signal=digital.reshape(-1, 1), fmt=["16"],
                adc_gain=[GAIN], baseline=[0], write_dir=str(directory))


def write_text(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    os.chmod(path, mode)


# ---------------------------------------------------------------- the sample entries' files

AUTHORS = "vmjudge example entry for beats2014 (synthetic data). Author: the vmjudge project.\n"

SETUP_SH = """#!/bin/sh
# Runs once in the guest, in the entry's home directory, before any record.
echo "beats2014 sample entry: checking python3 and numpy"
python3 -c "import numpy" || exit 1
"""

NEXT_SH = """#!/bin/sh
# Runs once per record: $1 is the record name; its files ($1.hea, $1.dat) are here.
# Writes $1.qrs, a WFDB annotation file with one NORMAL annotation per detected beat.
python3 detect.py "$1"
"""

DETECT_PY = '''"""beats2014 sample entry: a QRS detector that uses integer arithmetic only.

    python3 detect.py RECORD      reads RECORD.hea and its format-16 signal file,
                                  writes RECORD.qrs (WFDB MIT annotation format)

Every value that decides anything is an integer (numpy int64 or Python int), so the output
is the same byte for byte on any machine and with any numpy version: the judge compares the
training-set outputs made in its VM with the outputs/ submitted with the entry.
Method (after Pan and Tompkins): low-pass moving sum, 5-point derivative, square, 150 ms
moving-window integration, adaptive threshold with a 200 ms refractory period, then the
R peak is taken as the largest deviation from the local mean of the original signal.
"""

import sys
from fractions import Fraction

import numpy as np

NORMAL = 1  # annotation codes (WFDB ecgcodes.h)
SKIP = 59


def read_record(name):
    """First signal of a WFDB record in format 16 -> (int64 samples minus baseline, fs)."""
    with open(name + ".hea") as f:
        lines = [ln.split() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    fs = int(Fraction(lines[0][2].split("/")[0].split("(")[0])) if len(lines[0]) > 2 else 250
    fields = lines[1]
    fname, fmt = fields[0], fields[1]
    if fmt.split("x")[0].split(":")[0].split("+")[0] != "16":
        sys.exit(f"detect.py: only signal format 16 is supported, not {fmt}")
    zero = int(fields[4]) if len(fields) > 4 else 0
    baseline = zero
    if len(fields) > 2 and "(" in fields[2]:
        baseline = int(fields[2].split("(")[1].split(")")[0])
    same_file = sum(1 for sig in lines[1:] if sig[0] == fname)
    data = np.fromfile(fname, dtype="<i2")
    data = data[: len(data) // same_file * same_file].reshape(-1, same_file)[:, 0]
    return data.astype(np.int64) - baseline, fs


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


def encode(samples, code=NORMAL):
    """WFDB MIT annotation format: a 16-bit little-endian word per annotation (code in the top
    6 bits, sample delta in the low 10); a SKIP word and a 32-bit PDP-11-order delta before a
    delta over 1023; a zero word at the end."""
    out = bytearray()
    previous = 0
    for s in samples:
        delta = s - previous
        previous = s
        if delta > 1023:
            out += (SKIP << 10).to_bytes(2, "little")
            out += (delta >> 16).to_bytes(2, "little") + (delta & 0xFFFF).to_bytes(2, "little")
            delta = 0
        out += ((code << 10) | delta).to_bytes(2, "little")
    out += b"\\x00\\x00"
    return bytes(out)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 detect.py RECORD")
    record = sys.argv[1]
    x, fs = read_record(record)
    with open(record + ".qrs", "wb") as f:
        f.write(encode(detect(x, fs)))


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
# Hangs on purpose on training record 101: the per-record limit must stop stage 2 there.
if [ "$1" = 101 ]; then
    sleep 1000
fi
python3 detect.py "$1"
"""

EXAM_ERRORS_SH = """#!/bin/sh
# Fails on purpose on test records 201 and 204 (the training records, 100-104, are the ones
# with outputs/$1.qrs). Stage 3 must count the failures, never show this output, and still
# score the entry (those two records count as empty answers).
case "$1" in
201|204)
    echo "SECRET-TEST-OUTPUT $1"
    exit 3
    ;;
esac
python3 detect.py "$1"
"""

EXAM_OVER_CAP_SH = """#!/bin/sh
# Slow on purpose on every test record (any record other than the training records 100-104,
# the ones with outputs/$1.qrs): 6 x 14 s exceeds the 60 s stage-3 cap, so no score.
case "$1" in
100|101|102|103|104) ;;
*) sleep 14 ;;
esac
python3 detect.py "$1"
"""


def run_detector(entry: Path, records: list[str], source: Path) -> dict[str, bytes]:
    """Runs the entry's detect.py on the host, one record at a time, as next.sh would."""
    outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(entry / "detect.py", work / "detect.py")
        for r in records:
            for ext in ("hea", "dat"):
                shutil.copy(source / f"{r}.{ext}", work / f"{r}.{ext}")
            subprocess.run([sys.executable, "detect.py", r], cwd=work, check=True)
            outputs[r] = (work / f"{r}.qrs").read_bytes()
            ann = wfdb.rdann(str(work / r), "qrs")
            assert len(ann.sample) > 0 and set(ann.symbol) == {"N"}, r
    return outputs


def match(reference: list[int], detected: list[int]) -> tuple[int, int, int]:
    """(TP, FN, FP): each reference beat takes the nearest unmatched detection within the window."""
    free = sorted(detected)
    tp = 0
    for b in reference:
        best = min(free, key=lambda d: abs(d - b), default=None)
        if best is not None and abs(best - b) <= MATCH_WINDOW:
            free.remove(best)
            tp += 1
    return tp, len(reference) - tp, len(free)


def write_entries(entries: Path, training: Path) -> None:
    good = entries / "good"
    write_text(good / "AUTHORS.txt", AUTHORS)
    write_text(good / "setup.sh", SETUP_SH, 0o755)
    write_text(good / "next.sh", NEXT_SH, 0o755)
    write_text(good / "detect.py", DETECT_PY)
    outputs = run_detector(good, TRAINING, training)
    for r in TRAINING:
        (good / "outputs").mkdir(exist_ok=True)
        (good / "outputs" / f"{r}.qrs").write_bytes(outputs[r])
        os.chmod(good / "outputs" / f"{r}.qrs", 0o644)

    def variant(case: str) -> Path:
        path = entries / case
        shutil.copytree(good, path)
        return path

    os.remove(variant("missing-file") / "next.sh")
    write_text(variant("setup-error") / "setup.sh", SETUP_ERROR_SH, 0o755)
    # quiz-mismatch: outputs/102.qrs loses its last beat (a one-word annotation before the end word).
    qrs = variant("quiz-mismatch") / "outputs" / "102.qrs"
    data = qrs.read_bytes()
    last = wfdb.rdann(str(qrs.with_suffix("")), "qrs").sample.tolist()[-2:]
    assert data[-2:] == b"\0\0" and data[-3] >> 2 == 1 and last[1] - last[0] <= 1023, "last beat not one word"
    qrs.write_bytes(data[:-4] + b"\0\0")
    assert len(wfdb.rdann(str(qrs.with_suffix("")), "qrs").sample) == len(
        wfdb.rdann(str(good / "outputs" / "102"), "qrs").sample) - 1
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
    beats = {}
    for names, directory in ((TRAINING, out / "training"), (TEST, out / "test")):
        for r in names:
            digital, beats[r] = synthesize(r)
            write_record(directory, r, digital)
        write_text(directory / "RECORDS", "".join(f"{r}\n" for r in names))
    for r in TRAINING:  # participants have the training answers
        wfdb.wrann(r, "atr", np.array(beats[r]), symbol=["N"] * len(beats[r]), fs=FS, write_dir=str(out / "training"))
    for r in TEST:  # the test answers stay on the host
        wfdb.wrann(r, "atr", np.array(beats[r]), symbol=["N"] * len(beats[r]), fs=FS, write_dir=str(out / "reference"))
    for path in out.glob("*/*.*"):
        os.chmod(path, 0o644)
    write_entries(out / "entries", out / "training")

    # Keep the example meaningful: the good entry must find the test beats.
    detected = run_detector(out / "entries" / "good", TEST, out / "test")
    tp = fn = fp = 0
    for r in TEST:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / f"{r}.qrs").write_bytes(detected[r])
            found = wfdb.rdann(str(Path(tmp) / r), "qrs").sample.tolist()
        ref = wfdb.rdann(str(out / "reference" / r), "atr").sample.tolist()
        a, b, c = match(ref, found)
        tp, fn, fp = tp + a, fn + b, fp + c
    se, pp = tp / (tp + fn), tp / (tp + fp)
    print(f"beats2014 good entry on the test set: TP={tp} FN={fn} FP={fp} Se={se:.4f} +P={pp:.4f}")
    assert se >= MIN_SE_PP and pp >= MIN_SE_PP, "the good entry no longer detects the test beats well"


if __name__ == "__main__":
    main()
