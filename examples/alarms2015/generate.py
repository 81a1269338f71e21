#!/usr/bin/env python3
"""Writes the alarms2015 example challenge from scratch: synthetic ICU alarm records (ECG lead II
and a pulse, ABP or PLETH), their labels (1 true alarm, 0 false alarm) and the sample entries
(good, and one per failure case).

    python generate.py [--out DIR]      (DIR defaults to this file's directory)

Deletes and recreates DIR/training, DIR/test, DIR/reference and DIR/entries; image/ (sigstat's
source) is written by hand and left alone. Everything is seeded, so running it again gives
identical bytes. Needs numpy, and cc and make: the good entry's answers.txt is produced by
running its next.sh on the host, which calls sigstat, built here from image/sigstat into a
temporary directory (the same source as the guest image's, so both give the same answers).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

FS = 250
SECONDS = 10
N = FS * SECONDS
HERE = Path(__file__).resolve().parent
SEED = 2015
ALARMS = {"a": "Asystole", "b": "Bradycardia", "t": "Tachycardia", "v": "Ventricular_Tachycardia",
          "f": "Ventricular_Flutter_Fib"}
# (record, label, pulse signal); the first letter is the alarm type, as in the 2015 records.
TRAINING = [("a101l", 1, "ABP"), ("a102l", 0, "PLETH"), ("b103l", 1, "PLETH"), ("b104l", 0, "ABP"),
            ("t105l", 1, "ABP"), ("t106l", 0, "PLETH"), ("v107l", 1, "ABP"), ("v108l", 0, "ABP"),
            ("f109l", 1, "PLETH"), ("f110l", 0, "ABP")]
TEST = [("a201l", 0, "PLETH"), ("a202l", 1, "ABP"), ("b203l", 0, "ABP"), ("b204l", 1, "ABP"),
        ("t205l", 0, "PLETH"), ("t206l", 0, "ABP"), ("v207l", 0, "PLETH"), ("v208l", 1, "ABP"),
        ("f209l", 1, "ABP"), ("f210l", 0, "PLETH")]

# Signal name -> (units, gain, baseline in ADC units); the header's gain field is GAIN[(BASELINE)]/UNITS.
SIGNALS = {"II": ("mV", 200, 0), "ABP": ("mmHg", 100, 0), "PLETH": ("NU", 1000, 500)}
# Pulse -> (diastolic level, pulse height, level with no cardiac output, noise, delay after
# the R wave s, systolic width s); values in the signal's units.
PULSE = {"ABP": ((70, 80), (35, 45), 20.0, 0.3, 0.18, 0.07),
         "PLETH": ((0.8, 1.2), (0.8, 1.2), 0.5, 0.01, 0.25, 0.10)}

# (amplitude mV, offset from the R peak s, width s) of the Gaussian bumps making one beat.
P_WAVE = (0.15, -0.17, 0.025)
QRST = [(-0.10, -0.03, 0.010), (1.20, 0.0, 0.012), (-0.25, 0.03, 0.012), (0.30, 0.26, 0.050)]
VENTRICULAR = [(1.50, 0.0, 0.030), (-0.45, 0.08, 0.030), (-0.40, 0.32, 0.060)]
clock = np.arange(N) / FS  # each sample's time, s


def beat_times(rng: np.random.Generator, rate: float, start: float = 0.0, end: float = SECONDS) -> np.ndarray:
    """Beat times (s) at about `rate` a minute from a random phase after start until end."""
    rr = 60.0 / rate
    times, t = [], start + rng.uniform(0.2, 0.9) * rr
    while t < end - 0.1:
        times.append(t)
        t += rr * (1 + 0.03 * rng.standard_normal())
    return np.array(times)


def bumps(times: np.ndarray, shape: list[tuple[float, float, float]], scale: float = 1.0) -> np.ndarray:
    x = np.zeros(N)
    for tb in times:
        for amp, off, width in shape:
            x += scale * amp * np.exp(-0.5 * ((clock - tb - off) / width) ** 2)
    return x


def ecg(rng: np.random.Generator, times: np.ndarray, shape=None, scale: float | None = None) -> np.ndarray:
    """Beats plus a little baseline wander and noise, in mV."""
    x = bumps(times, shape or QRST + [P_WAVE], scale if scale is not None else rng.uniform(0.8, 1.2))
    x += rng.uniform(0.03, 0.08) * np.sin(2 * np.pi * rng.uniform(0.15, 0.35) * clock + rng.uniform(0, 2 * np.pi))
    return x + 0.01 * rng.standard_normal(N)


def pulse(rng: np.random.Generator, kind: str, times: np.ndarray, stops: float | None = None,
          height: float = 1.0, level: float = 1.0) -> np.ndarray:
    """The pulse wave of each beat; after `stops` (s) the heart pumps nothing and the signal sinks
    to its no-output level. height, level: multiply the pulse height and the diastolic level."""
    (dia_lo, dia_hi), (pp_lo, pp_hi), floor, noise, delay, width = PULSE[kind]
    dia, pp = rng.uniform(dia_lo, dia_hi) * level, rng.uniform(pp_lo, pp_hi) * height
    rr = float(np.median(np.diff(times))) if len(times) > 1 else 1.0
    shape = [(1.0, delay + 0.12, width if rr > 0.5 else 0.05)]
    if rr > 0.6:
        shape.append((0.15, delay + 0.42, 0.04))  # the dicrotic wave
    x = dia + pp * bumps(times, shape)
    if stops is not None:
        after = clock > stops
        x[after] = floor + (x[after] - floor) * np.exp(-(clock[after] - stops) / 0.4)
    return x + noise * rng.standard_normal(N)


def synthesize(name: str, label: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(ECG in mV, pulse in its units) of one alarm record."""
    rng = np.random.default_rng([SEED, int(name[1:4]), ord(name[0])])
    alarm = name[0]
    normal = beat_times(rng, rng.uniform(65, 85))
    if alarm == "a" and label:  # no beat after the first seconds, no pulse
        beats = beat_times(rng, rng.uniform(60, 75), end=rng.uniform(2.2, 2.8))
        return ecg(rng, beats), pulse(rng, kind, beats, stops=beats[-1] + 0.3)
    if alarm == "a":  # the ECG lead comes off; the pulse goes on
        x = ecg(rng, normal)
        off = rng.uniform(2.5, 3.5)
        lead_off = (clock > off) & (clock < off + 6)
        x[lead_off] = 0.005 * rng.standard_normal(int(np.sum(lead_off)))
        return x, pulse(rng, kind, normal)
    if alarm == "b" and label:  # slow beats, slow pulse
        beats = beat_times(rng, rng.uniform(32, 38))
        return ecg(rng, beats), pulse(rng, kind, beats)
    if alarm == "b":  # every other QRS too small for the monitor; the pulse counts them all
        x = ecg(rng, normal[0::2]) + bumps(normal[1::2], QRST, 0.2)
        return x, pulse(rng, kind, normal)
    if alarm == "t" and label:  # a fast narrow-complex rhythm, and a fast pulse
        beats = beat_times(rng, rng.uniform(150, 170))
        return ecg(rng, beats, QRST), pulse(rng, kind, beats, height=0.7)
    if alarm == "t":  # sharp artefact spikes between the beats
        spikes = rng.uniform(0.2, SECONDS - 0.2, int(rng.integers(14, 20)))
        return ecg(rng, normal) + bumps(spikes, [(1.4, 0.0, 0.008)]), pulse(rng, kind, normal)
    if alarm == "v" and label:  # wide ventricular complexes, fast and weak pulses
        beats = beat_times(rng, rng.uniform(140, 170))
        return ecg(rng, beats, VENTRICULAR), pulse(rng, kind, beats, height=0.5, level=0.8)
    if alarm == "v":  # slow motion artefact that looks like wide complexes
        x = ecg(rng, normal)
        start = rng.uniform(2, 4)
        burst = (clock > start) & (clock < start + 4)
        x[burst] += 1.0 * np.sin(2 * np.pi * rng.uniform(2.0, 2.8) * clock[burst])
        return x, pulse(rng, kind, normal)
    if alarm == "f" and label:  # fibrillation after two seconds; the pulse stops
        beats = beat_times(rng, rng.uniform(65, 80), end=2.0)
        x = ecg(rng, beats)
        fib = clock > 2.0
        waves = sum(rng.uniform(0.15, 0.3) * np.sin(2 * np.pi * rng.uniform(4, 6.5) * clock + rng.uniform(0, 7))
                    for _ in range(3))
        x[fib] += waves[fib]
        return x, pulse(rng, kind, beats, stops=beats[-1] + 0.3)
    # "f", false: a fast tremor-like artefact over a normal rhythm
    x = ecg(rng, normal)
    start = rng.uniform(1.5, 3.5)
    burst = (clock > start) & (clock < start + 5)
    x[burst] += 0.8 * np.sin(2 * np.pi * rng.uniform(4, 5) * clock[burst])
    return x, pulse(rng, kind, normal)


def digital(x: np.ndarray, name: str) -> np.ndarray:
    _, gain, baseline = SIGNALS[name]
    return np.clip(np.round(x * gain + baseline), -32767, 32767).astype(np.int16)  # -32768: "no value"


def write_record(directory: Path, name: str, pulse_name: str, ecg_mv: np.ndarray, pulse_x: np.ndarray) -> None:
    """RECORD.dat (format 16, interleaved) and RECORD.hea, whose only comment is the alarm type."""
    names = ["II", pulse_name]
    signals = np.stack([digital(ecg_mv, "II"), digital(pulse_x, pulse_name)], axis=1)
    (directory / f"{name}.dat").write_bytes(signals.astype("<i2").tobytes())
    lines = [f"{name} 2 {FS} {N}"]
    for i, sig in enumerate(names):
        units, gain, baseline = SIGNALS[sig]
        gain_field = f"{gain}({baseline})/{units}" if baseline else f"{gain}/{units}"
        checksum = (int(signals[:, i].astype(np.int64).sum()) + 32768) % 65536 - 32768
        lines.append(f"{name}.dat 16 {gain_field} 16 0 {int(signals[0, i])} {checksum} 0 {sig}")
    lines.append(f"#{ALARMS[name[0]]}")
    write_text(directory / f"{name}.hea", "\n".join(lines) + "\n")


def write_text(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    os.chmod(path, mode)


# ---------------------------------------------------------------- the sample entries' files

AUTHORS = "vmjudge example entry for alarms2015 (synthetic data). Author: the vmjudge project.\n"

LICENSE = """This sample entry was written for vmjudge's alarms2015 example challenge.
To the extent possible under law, its authors waive all copyright and related rights in it
(CC0 1.0 Universal: https://creativecommons.org/publicdomain/zero/1.0/).
"""

SETUP_SH = """#!/bin/sh
# Runs once in the guest, in the entry's home directory, before any record.
echo "alarms2015 sample entry: checking sigstat and perl"
command -v sigstat >/dev/null || { echo "sigstat is not installed"; exit 1; }
perl -c classify.pl || exit 1
"""

NEXT_SH = r"""#!/bin/sh
# Runs once per record: $1 is the record name; its files ($1.hea, $1.dat) are here.
# sigstat, which the challenge's image builds from its image/sigstat, prints each signal's
# statistics; classify.pl reads them and appends "$1,1" (true alarm) or "$1,0" (false alarm)
# to answers.txt.
set -e
stats=$(sigstat "$1")
printf '%s\n' "$stats" | perl classify.pl "$1"
"""

CLASSIFY_PL = r"""# alarms2015 sample entry: is the alarm true (1) or false (0)?
#
#     sigstat RECORD | perl classify.pl RECORD    appends "RECORD,1" or "RECORD,0" to answers.txt
#
# Reads sigstat's output (its format is at the top of the challenge's image/sigstat/sigstat.c).
# The alarm is judged by the pulse (the ABP or PLETH signal), which the ECG's artefacts (a lead
# off, spikes, motion) leave alone. There is no pulse when it has a flat line of at least
# 3 s or hardly varies (sd under 5 % of its mean); its rate is its peaks a minute.
#   Asystole, Ventricular_Flutter_Fib: true when there is no pulse;
#   Bradycardia: no pulse, or a rate under 45; Tachycardia: no pulse, or over 130;
#   Ventricular_Tachycardia: no pulse, or over 100.
# Without a usable pulse signal, or for an alarm type it does not know, it keeps the alarm:
# suppressing a true alarm costs five times as much as keeping a false one.
# Core Perl only (the guest has perl-base).
use strict;
use warnings;

my $FLAT = 3;       # seconds
my $STILL = 0.05;   # sd / |mean|
my %RATE_SAYS_TRUE = (Bradycardia => sub { $_[0] < 45 }, Tachycardia => sub { $_[0] > 130 },
                      Ventricular_Tachycardia => sub { $_[0] > 100 });   # beats a minute
my %NO_PULSE_ONLY = (Asystole => 1, Ventricular_Flutter_Fib => 1);

die "usage: sigstat RECORD | perl classify.pl RECORD\n" unless @ARGV == 1;
my $record = $ARGV[0];
my ($seconds, $alarm, %signal);
while (my $line = <STDIN>) {
    my ($tag, @f) = split ' ', $line;
    next unless defined $tag;
    if ($tag eq 'record') {
        my %kv = @f[1 .. $#f];
        $seconds = $kv{seconds};
    } elsif ($tag eq 'alarm') {
        $alarm = $f[0];
    } elsif ($tag eq 'signal') {
        my %kv = @f[2 .. $#f];
        $signal{$f[1]} //= \%kv;
    }
}
die "classify.pl: no record or alarm line from sigstat\n" unless defined $seconds && defined $alarm;

sub number { my ($v) = @_; return defined $v && $v =~ /^-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i; }

my $true = 1;
my ($pulse) = grep { defined } @signal{qw(ABP PLETH)};
if ($pulse && number($seconds) && $seconds > 0 && !grep { !number($pulse->{$_}) } qw(mean sd peaks flat)) {
    my $none = $pulse->{flat} >= $FLAT || $pulse->{sd} < $STILL * abs($pulse->{mean});
    my $rate = $pulse->{peaks} * 60 / $seconds;
    if ($NO_PULSE_ONLY{$alarm}) {
        $true = $none;
    } elsif (my $says_true = $RATE_SAYS_TRUE{$alarm}) {
        $true = $none || $says_true->($rate);
    }
}
open(my $out, '>>', 'answers.txt') or die "classify.pl: answers.txt: $!\n";
print $out "$record,", ($true ? 1 : 0), "\n";
close($out) or die "classify.pl: answers.txt: $!\n";
"""

# Failure cases: each is the good entry with one change.
SETUP_ERROR_SH = """#!/bin/sh
# Fails on purpose: stage 1 must stop and report this output.
echo "cannot build"
exit 1
"""

QUIZ_TIMEOUT_SH = r"""#!/bin/sh
# Hangs on purpose on training record a102l: the per-record limit must stop stage 2 there.
if [ "$1" = a102l ]; then
    sleep 1000
fi
set -e
stats=$(sigstat "$1")
printf '%s\n' "$stats" | perl classify.pl "$1"
"""

EXAM_ERRORS_SH = r"""#!/bin/sh
# Fails on purpose on test records a202l and b203l (training records are numbered 1..). Stage 3
# must count the failures, never show this output, and still score the entry (those two
# records count as missing answers, which suppress the alarm: 0).
case "$1" in
a202l|b203l)
    echo "SECRET-TEST-OUTPUT $1"
    exit 3
    ;;
esac
set -e
stats=$(sigstat "$1")
printf '%s\n' "$stats" | perl classify.pl "$1"
"""

EXAM_OVER_CAP_SH = r"""#!/bin/sh
# Slow on purpose on every test record (any record not named like the training records,
# a101l to f110l): 10 x 14 s exceeds the 60 s stage-3 cap, so no score.
case "$1" in
[abtvf]1[0-9][0-9]l) ;;
*) sleep 14 ;;
esac
set -e
stats=$(sigstat "$1")
printf '%s\n' "$stats" | perl classify.pl "$1"
"""


def build_sigstat(into: Path) -> Path:
    """Builds image/sigstat with the host's make in `into` (never in the source tree); returns
    the directory holding the program."""
    for name in ("sigstat.c", "Makefile"):
        shutil.copy(HERE / "image" / "sigstat" / name, into / name)
    subprocess.run(["make", "-s", "-C", str(into)], check=True)
    return into


def run_entry(entry: Path, records: list[str], source: Path, sigstat_dir: Path) -> str:
    """Runs the entry's next.sh on the host for each record in order, as the judge would,
    starting with no answers.txt; returns the answers.txt it leaves."""
    env = {**os.environ, "PATH": f"{sigstat_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in ("next.sh", "classify.pl"):
            shutil.copy2(entry / name, work / name)
        for r in records:
            for ext in ("hea", "dat"):
                shutil.copy(source / f"{r}.{ext}", work / f"{r}.{ext}")
            done = subprocess.run(["./next.sh", r], cwd=work, env=env, check=True, capture_output=True)
            assert done.stdout == b"" and done.stderr == b"", (r, done)
        return (work / "answers.txt").read_text()


def parse(text: str) -> dict[str, str]:
    return dict(line.split(",", 1) for line in text.splitlines())


def write_entries(entries: Path, training: Path, sigstat_dir: Path) -> None:
    good = entries / "good"
    write_text(good / "AUTHORS.txt", AUTHORS)
    write_text(good / "LICENSE.txt", LICENSE)
    write_text(good / "setup.sh", SETUP_SH, 0o755)
    write_text(good / "next.sh", NEXT_SH, 0o755)
    write_text(good / "classify.pl", CLASSIFY_PL)
    answers = run_entry(good, [r for r, _, _ in TRAINING], training, sigstat_dir)
    assert list(parse(answers)) == [r for r, _, _ in TRAINING]
    write_text(good / "answers.txt", answers)

    def variant(case: str) -> Path:
        path = entries / case
        shutil.copytree(good, path)
        return path

    os.remove(variant("missing-file") / "next.sh")
    write_text(variant("setup-error") / "setup.sh", SETUP_ERROR_SH, 0o755)
    lines = answers.splitlines(keepends=True)
    record, label = lines[2].strip().split(",")  # b103l
    lines[2] = f"{record},{1 - int(label)}\n"
    write_text(variant("quiz-mismatch") / "answers.txt", "".join(lines))
    write_text(variant("quiz-timeout") / "next.sh", QUIZ_TIMEOUT_SH, 0o755)
    write_text(variant("dryrun") / "DRYRUN", "")
    write_text(variant("exam-errors") / "next.sh", EXAM_ERRORS_SH, 0o755)
    write_text(variant("exam-over-cap") / "next.sh", EXAM_OVER_CAP_SH, 0o755)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    out = parser.parse_args().out
    for sub in ("training", "test", "reference", "entries"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)
    for records, directory, labels in ((TRAINING, out / "training", out / "training" / "REFERENCE.csv"),
                                       (TEST, out / "test", out / "reference" / "REFERENCE.csv")):
        for r, label, kind in records:
            write_record(directory, r, kind, *synthesize(r, label, kind))
        write_text(directory / "RECORDS", "".join(f"{r}\n" for r, _, _ in records))
        # Training labels go with the training set (participants have them); test labels only
        # to reference/, which never enters a VM.
        write_text(labels, "".join(f"{r},{label}\n" for r, label, _ in records))
    for path in (p for sub in ("training", "test", "reference") for p in (out / sub).iterdir()):
        os.chmod(path, 0o644)
    with tempfile.TemporaryDirectory() as tmp:
        sigstat_dir = build_sigstat(Path(tmp))
        write_entries(out / "entries", out / "training", sigstat_dir)
        given = parse(run_entry(out / "entries" / "good", [r for r, _, _ in TEST], out / "test", sigstat_dir))

    # Keep the example meaningful: the good entry must judge every record right.
    truth = parse((out / "reference" / "REFERENCE.csv").read_text())
    train_truth = parse((out / "training" / "REFERENCE.csv").read_text())
    train_given = parse((out / "entries" / "good" / "answers.txt").read_text())
    wrong = [r for r in truth if given[r] != truth[r]] + [r for r in train_truth if train_given[r] != train_truth[r]]
    print(f"alarms2015 good entry: {len(truth) + len(train_truth) - len(wrong)}/{len(truth) + len(train_truth)} "
          f"records right (test and training){'; wrong: ' + ' '.join(wrong) if wrong else ''}")
    assert not wrong, "the good entry no longer judges every record right"


if __name__ == "__main__":
    main()
