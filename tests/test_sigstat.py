"""sigstat, the C tool alarms2015's image builds from examples/alarms2015/image/sigstat: what it
prints agrees with numpy (and the headers as wfdb-python reads them), in its documented format,
and it refuses a malformed record with one clear line and exit status 2. Host only: built with
the host's make (tests/sigstat_build.py), as the guest image builds it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import wfdb

from .sigstat_build import build_sigstat

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "alarms2015"
RECORD_RE = re.compile(r"^record (\S+) signals (\d+) fs (\S+) samples (\d+) seconds (\S+)$")
SIGNAL_RE = re.compile(r"^signal (\d+) (\S+) units (\S+) samples (\d+) invalid (\d+) mean (\S+) sd (\S+) "
                       r"min (\S+) max (\S+) peaks (\d+) flat (\S+)$")
INVALID = -32768


@pytest.fixture(scope="module")
def sigstat(tmp_path_factory) -> Path:
    return build_sigstat(tmp_path_factory.mktemp("sigstat")) / "sigstat"


def run(sigstat: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(sigstat), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


# ------------------------------------------------------------------ the statistics, by the documentation

def peaks(x: np.ndarray, mean: float, level: float) -> int:
    """Rises above `level` after being at or below `mean` since the last one; the first sample only arms."""
    count, armed = 0, None
    for v in x.tolist():
        if armed is None:
            armed = not v > level
        elif armed and v > level:
            count, armed = count + 1, False
        elif not armed and v <= mean:
            armed = True
    return count


def longest_flat(digital: np.ndarray) -> int:
    """Brute force: the longest run of valid samples whose range is at most 1/20 of the whole range."""
    valid = digital != INVALID
    values = digital[valid].astype(np.int64)
    whole = int(values.max() - values.min())
    x = digital.astype(np.int64)
    best = 0
    for start in np.nonzero(valid)[0].tolist():
        run = x[start:]
        stop = np.nonzero(run == INVALID)[0]
        run = run[: stop[0]] if len(stop) else run
        too_wide = np.nonzero((np.maximum.accumulate(run) - np.minimum.accumulate(run)) * 20 > whole)[0]
        best = max(best, int(too_wide[0]) if len(too_wide) else len(run))
    return best


def expected(digital: np.ndarray, gain: float, baseline: int, fs: float) -> dict[str, float]:
    values = digital[digital != INVALID].astype(np.int64)
    mean = float(values.sum()) / len(values)
    high = int(values.max())
    return {"invalid": int(np.sum(digital == INVALID)), "mean": (mean - baseline) / gain,
            "sd": float(np.sqrt(np.mean((values - mean) ** 2))) / gain,
            "min": (int(values.min()) - baseline) / gain, "max": (high - baseline) / gain,
            "peaks": peaks(values, mean, mean + (high - mean) / 2), "flat": longest_flat(digital) / fs}


def check_signal(line: str, index: int, name: str, units: str, digital: np.ndarray, gain: float, baseline: int,
                 fs: float) -> None:
    m = SIGNAL_RE.match(line)
    assert m, line
    assert (int(m[1]), m[2], m[3], int(m[4])) == (index, name, units, len(digital))
    want = expected(digital, gain, baseline, fs)
    assert (int(m[5]), int(m[10])) == (want["invalid"], want["peaks"]), line
    for key, group in (("mean", 6), ("sd", 7), ("min", 8), ("max", 9), ("flat", 11)):
        assert float(m[group]) == pytest.approx(want[key], rel=1e-5, abs=1e-9), (key, line)


# ------------------------------------------------------------------ the tests

@pytest.mark.parametrize("subset", ["training", "test"])
def test_statistics_agree_with_numpy_on_every_record(sigstat, subset):
    for record in (EXAMPLE / subset / "RECORDS").read_text().split():
        path = EXAMPLE / subset / record
        rec = wfdb.rdrecord(str(path), physical=False)
        done = run(sigstat, str(path))
        assert done.returncode == 0 and done.stderr == "", done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == 2 + rec.n_sig
        assert RECORD_RE.match(lines[0]).groups() == (record, str(rec.n_sig), f"{rec.fs:g}", str(rec.sig_len),
                                                      f"{rec.sig_len / rec.fs:g}")
        assert lines[1] == f"alarm {rec.comments[0]}"
        for i in range(rec.n_sig):
            check_signal(lines[2 + i], i, rec.sig_name[i], rec.units[i], rec.d_signal[:, i], rec.adc_gain[i],
                         rec.baseline[i], rec.fs)


def test_defaults_offsets_invalid_samples_and_odd_headers(sigstat, tmp_path):
    """A header with CRLF ends, a comment before the record line, a sampling frequency with a
    counter part and a base time, a byte offset, fields left out (gain 0: 200, units mV,
    baseline ADCZERO), a description with a space; samples holding "no value"; a constant signal;
    a signal file longer than needed."""
    header = ("# made by hand: comments may come first\r\n"
              "odd 3 100/1000(0) 300 10:00:00\r\n"
              "\r\n"
              "odd.dat 16+24 0 12 5\r\n"
              "odd.dat 16+24 50(-3)/uV 16 0 77 23100 0 flat line\r\n"
              "odd.dat 16+24 2.5/mmHg\r\n"
              "#second comment\r\n")
    (tmp_path / "odd.hea").write_bytes(header.encode())
    rng = np.random.default_rng(13)
    first = rng.integers(-3000, 3000, 300).astype(np.int16)
    first[[0, 40, 41, 200]] = INVALID
    constant = np.full(300, 77, np.int16)
    third = (400 * np.sin(np.arange(300) / 5) + rng.integers(-20, 20, 300)).astype(np.int16)
    frames = np.stack([first, constant, third], axis=1).astype("<i2").tobytes()
    (tmp_path / "odd.dat").write_bytes(b"\xab" * 24 + frames + b"\x01\x02\x03")
    done = run(sigstat, "odd.hea", cwd=tmp_path)  # RECORD.hea names the record too
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["record odd signals 3 fs 100 samples 300 seconds 3",
                         "alarm made_by_hand:_comments_may_come_first"]
    check_signal(lines[2], 0, "-", "mV", first, 200, 5, 100)
    check_signal(lines[3], 1, "flat_line", "uV", constant, 50, -3, 100)
    assert lines[3].endswith(" sd 0 min 1.6 max 1.6 peaks 0 flat 3")  # constant: flat from end to end
    check_signal(lines[4], 2, "-", "mmHg", third, 2.5, 0, 100)
    assert len(lines) == 5


def test_statistics_by_hand(sigstat, tmp_path):
    """4 2 4 2 4 2 0 0 0 at 1 Hz: mean 2, sd sqrt(24/9); the level is 3; the first 4 only arms
    (it starts above), each 2 (at the mean itself) re-arms, so two peaks; a band 4/20 wide holds
    only equal samples, so the flat stretch is the three zeros."""
    (tmp_path / "h.hea").write_text("h 1 1 9\nh.dat 16 1/mV 16 0 0 0 0 x\n")
    (tmp_path / "h.dat").write_bytes(np.array([4, 2, 4, 2, 4, 2, 0, 0, 0], "<i2").tobytes())
    done = run(sigstat, str(tmp_path / "h"))
    assert done.stdout.splitlines()[2] == \
        "signal 0 x units mV samples 9 invalid 0 mean 2 sd 1.63299 min 0 max 4 peaks 2 flat 3"


def test_a_signal_with_no_valid_sample(sigstat, tmp_path):
    (tmp_path / "gone.hea").write_text("gone 1 250 4\ngone.dat 16 200/mV 16 0 0 0 0 II\n")
    (tmp_path / "gone.dat").write_bytes(np.full(4, INVALID, "<i2").tobytes())
    done = run(sigstat, str(tmp_path / "gone"))
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "record gone signals 1 fs 250 samples 4 seconds 0.016", "alarm -",
        "signal 0 II units mV samples 4 invalid 4 mean - sd - min - max - peaks 0 flat 0"]


def test_a_checksum_that_does_not_match_is_a_warning(sigstat, tmp_path):
    (tmp_path / "c.hea").write_text("c 1 250 3\nc.dat 16 200/mV 16 0 1 7 0 II\n#Asystole\n")
    (tmp_path / "c.dat").write_bytes(np.array([1, 2, 3], "<i2").tobytes())  # sums to 6, not 7
    done = run(sigstat, str(tmp_path / "c"))
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 3
    assert done.stderr == f"sigstat: warning: {tmp_path}/c.hea: signal 0 (II): the samples do not match " \
                          "the header's checksum 7\n"


GOOD_HEADER = "r 2 250 10\nr.dat 16 200/mV 16 0 0 0 0 II\nr.dat 16 100/mmHg 16 0 0 0 0 ABP\n#Asystole\n"
GOOD_DAT = bytes(40)


def header_with(old: str, new: str) -> str:
    assert old in GOOD_HEADER
    return GOOD_HEADER.replace(old, new, 1)


REFUSED = {
    "short signal file": (GOOD_HEADER, bytes(39), "r.dat: 39 bytes, short of the 40 the header needs (10 samples of "
                                                  "2 signals of 2 bytes from byte 0)"),
    "no signal file": (GOOD_HEADER, None, "r.dat: cannot open: No such file or directory"),
    "no header": (None, GOOD_DAT, "r.hea: cannot open: No such file or directory"),
    "empty header": ("", GOOD_DAT, "r.hea: no record line: not a WFDB header"),
    "comments only": ("#Asystole\n\n", GOOD_DAT, "r.hea: no record line"),
    "signals not a number": (header_with("r 2", "r two"), GOOD_DAT, "line 1: the number of signals \"two\" is not "
                                                                    "a whole number from 1 to 256"),
    "no signals": (header_with("r 2", "r 0"), GOOD_DAT, "the number of signals \"0\" is not"),
    "no frequency": ("r 2\n", GOOD_DAT, "line 1: no sampling frequency"),
    "frequency not a number": (header_with("250", "fast"), GOOD_DAT, "the sampling frequency \"fast\" is not"),
    "frequency nan": (header_with("250", "nan"), GOOD_DAT, "the sampling frequency \"nan\" is not"),
    "frequency zero": (header_with("250", "0"), GOOD_DAT, "the sampling frequency \"0\" is not a positive number"),
    "frequency with junk": (header_with("250", "250Hz"), GOOD_DAT, "the sampling frequency \"250Hz\" is not"),
    "no sample count": (header_with("250 10", "250"), GOOD_DAT, "line 1: no number of samples"),
    "sample count overflows": (header_with(" 10\n", " 99999999999999999999\n"), GOOD_DAT,
                               "the number of samples \"99999999999999999999\" is not a whole number"),
    "more samples than it can hold": (header_with(" 10\n", " 9223372036854775807\n"), GOOD_DAT,
                                      "9223372036854775807 samples of 2 signals is more than sigstat can hold"),
    "a lying sample count": (header_with(" 10\n", " 1000000000000\n"), GOOD_DAT,
                             "r.dat: 40 bytes, short of the 4000000000000 the header needs"),
    "multi-segment": (header_with("r 2", "r/2 2"), GOOD_DAT, "\"r/2\" is a multi-segment record"),
    "a missing signal line": (header_with("r 2", "r 3"), GOOD_DAT, "2 signal line(s), but the first line "
                                                                   "announces 3"),
    "another format": (header_with("r.dat 16 100", "r.dat 212 100"), GOOD_DAT, "line 3: format \"212\": sigstat "
                                                                               "reads format 16 only"),
    "a skew": (header_with("r.dat 16 100", "r.dat 16:2 100"), GOOD_DAT, "format 16 or 16+OFFSET only"),
    "a negative offset": (header_with("r.dat 16 100", "r.dat 16+-4 100"), GOOD_DAT, "the byte offset \"-4\""),
    "offsets differ": (header_with("r.dat 16 100", "r.dat 16+2 100"), GOOD_DAT, "signal 1 starts at byte 2"),
    "no format": (header_with("r.dat 16 100/mmHg 16 0 0 0 0 ABP", "r.dat"), GOOD_DAT, "line 3: no format"),
    "a file elsewhere": (GOOD_HEADER.replace("r.dat", "../r.dat"), GOOD_DAT, "signal file \"../r.dat\": sigstat "
                                                                             "reads a file beside the header only"),
    "standard input": (GOOD_HEADER.replace("r.dat", "-"), GOOD_DAT, "signal file \"-\""),
    "two files": (header_with("r.dat 16 100", "s.dat 16 100"), GOOD_DAT, "signal 1 is in \"s.dat\", not \"r.dat\""),
    "a bad gain": (header_with("200/mV", "200x/mV"), GOOD_DAT, "gain \"200x/mV\" is not GAIN, GAIN(BASELINE)"),
    "a negative gain": (header_with("200/mV", "-200/mV"), GOOD_DAT, "the gain \"-200/mV\" is not a number of at "
                                                                    "least 0"),
    "an open baseline": (header_with("200/mV", "200(3/mV"), GOOD_DAT, "the baseline needs a closing ')'"),
    "no units": (header_with("200/mV", "200/"), GOOD_DAT, "no units after '/'"),
    "a bad ADC zero": (header_with("200/mV 16 0", "200/mV 16 zero"), GOOD_DAT, "the ADC zero \"zero\""),
    "a bad checksum field": (header_with("200/mV 16 0 0 0", "200/mV 16 0 0 x"), GOOD_DAT, "the checksum \"x\""),
    "a line too many": (header_with("#Asystole", "r.dat 16 100/mmHg"), GOOD_DAT, "line 4: a line after the 2 "
                                                                                 "signal line(s) that is not a "
                                                                                 "comment"),
    "a NUL byte": (header_with("ABP", "A\0BP"), GOOD_DAT, "line 3 holds a NUL byte"),
    "a terminal escape": (header_with("r 2", "r 2\x1b[2J"), GOOD_DAT, "the number of signals \"2?[2J\" is not"),
    "a line too long": (header_with("#Asystole", "#" + "x" * 5000), GOOD_DAT, "line 4 is longer than 4095 bytes"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_malformed_record_is_refused_with_one_line_and_status_2(sigstat, tmp_path, case):
    header, dat, message = REFUSED[case]
    if header is not None:
        (tmp_path / "r.hea").write_bytes(header.encode())
    if dat is not None:
        (tmp_path / "r.dat").write_bytes(dat)
    done = run(sigstat, "r", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("sigstat: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr, done.stderr


def test_usage(sigstat):
    for args in ((), ("a", "b"), ("-x",), ("",)):
        done = run(sigstat, *args)
        assert done.returncode == 2 and done.stdout == "" and done.stderr.startswith("usage: sigstat RECORD\n")
    done = run(sigstat, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: sigstat RECORD\n")
