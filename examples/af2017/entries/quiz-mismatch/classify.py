"""af2017 sample entry: rhythm classification using integer arithmetic only.

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
        f.write(f"{record},{label}\n")


if __name__ == "__main__":
    main()
