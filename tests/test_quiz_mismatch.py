"""What the participant is shown at a quiz mismatch (#16): both sides. For answer lines, the
submitted line and the produced one (or that it is missing); for result files, both sizes and
the bytes of each around the first difference, bounded however large the files. Only the
training record's own bytes appear: the quiz never sees a test record."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vmjudge.config import Challenge, ResultsRule
from vmjudge.stages.quiz.mismatch import EXCERPT, first_difference, numbers_only
from vmjudge.stages.quiz.stage import Comparison, _outcome
from vmjudge.vm.channel import CommandResult, FileResult, Transcript
from vmjudge.vm.reading import JobRun


@dataclass
class Ctx:
    challenge: Challenge
    entry_dir: Path


def message(tmp_path: Path, rule: ResultsRule, records: tuple[str, ...], files: list[dict[str, FileResult]]) -> str:
    compare = Comparison(Ctx(Challenge(name="c", directory=tmp_path, results=rule), tmp_path), records)
    for i, produced in enumerate(files):
        cmd = CommandResult(index=i, name=f"next.sh {records[i]}", status="ok", exit_code=0)
        cmd.files.update(produced)
        if compare.on_end(cmd):
            return compare.failure[2]
    raise AssertionError("no mismatch")


def sheet(data: bytes) -> dict[str, FileResult]:
    return {"answers.txt": FileResult("answers.txt", len(data), data)}


def test_answer_lines_show_the_submitted_and_the_produced_line(tmp_path):
    (tmp_path / "answers.txt").write_bytes(b"A0001,N\nA0002,A\nA0003,N\n")
    said = message(tmp_path, ResultsRule(), ("A0001", "A0002", "A0003"),
                   [sheet(b"A0001,N\n"), sheet(b"A0001,N\nA0002,O\n")])
    assert said == ("next.sh A0002: output does not match submission\n"
                    "  submitted (answers.txt): A0002,A\n"
                    "  produced (answers.txt): A0002,O")


def test_a_missing_line_and_a_lost_earlier_line_say_so(tmp_path):
    (tmp_path / "answers.txt").write_bytes(b"A0001,N\nA0002,A\n")
    missing = message(tmp_path, ResultsRule(), ("A0001", "A0002"), [sheet(b"A0001,N\n"), sheet(b"A0001,N\nA0003,A\n")])
    assert missing == ("next.sh A0002: no line for A0002 in answers.txt\n"
                       "  submitted (answers.txt): A0002,A\n"
                       "  produced (answers.txt): no line for A0002")
    lost = message(tmp_path, ResultsRule(), ("A0001", "A0002"), [sheet(b"A0001,N\n"), sheet(b"A0002,A\n")])
    assert lost == ("next.sh A0002: answers.txt no longer holds the submitted line for A0001\n"
                    "  submitted (answers.txt): A0001,N\n"
                    "  produced (answers.txt): no line for A0001")


def test_answer_lines_are_bounded_and_escaped(tmp_path):
    (tmp_path / "answers.txt").write_bytes(b"A0001,N\n")
    said = message(tmp_path, ResultsRule(), ("A0001",), [sheet(b"A0001,\x1b[31m" + b"x" * 5000 + b"\n")])
    produced = said.splitlines()[-1]
    assert produced.startswith("  produced (answers.txt): A0001,\\x1b[31mxxx") and produced.endswith("x…")
    assert len(produced) < 300 and "\x1b" not in said


FILES = ResultsRule(style="files", pattern="{record}.qrs", submitted="outputs/{record}.qrs")


def qrs(name: str, data: bytes, kept: int | None = None) -> dict[str, FileResult]:
    return {name: FileResult(name, len(data), data[:kept] if kept is not None else data)}


def test_files_show_both_sizes_and_the_bytes_around_the_first_difference(tmp_path):
    (tmp_path / "outputs").mkdir()
    submitted = bytes(range(64)) * 4
    (tmp_path / "outputs" / "100.qrs").write_bytes(submitted)
    produced = submitted[:100] + b"\xff" + submitted[101:200]
    said = message(tmp_path, FILES, ("100",), [qrs("100.qrs", produced)])
    assert said.splitlines() == [
        "next.sh 100: output does not match submission",
        "  submitted outputs/100.qrs: 256 bytes",
        "  produced 100.qrs: 200 bytes",
        "  first difference at byte 100:",
        "    submitted: 0000005e  1e 1f 20 21 22 23 24 25 26 27 28 29 2a 2b 2c 2d  |.. !\"#$%&'()*+,-|",
        "    produced:  0000005e  1e 1f 20 21 22 23 ff 25 26 27 28 29 2a 2b 2c 2d  |.. !\"#.%&'()*+,-|",
    ]


def test_a_file_that_is_the_others_start_differs_where_the_shorter_ends(tmp_path):
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "100.qrs").write_bytes(b"abc")
    said = message(tmp_path, FILES, ("100",), [qrs("100.qrs", b"abcdef")])
    assert "  first difference at byte 3:" in said
    assert said.endswith("    submitted: 00000000  61 62 63" + " " * (EXCERPT * 3 - 1 - 8) + "  |abc|\n"
                         "    produced:  00000000  61 62 63 64 65 66" + " " * (EXCERPT * 3 - 1 - 17) + "  |abcdef|")


def test_a_missing_submitted_file_and_a_head_that_matches_say_so(tmp_path):
    (tmp_path / "outputs").mkdir()
    assert message(tmp_path, FILES, ("100",), [qrs("100.qrs", b"x")]).endswith("\n  the entry has no outputs/100.qrs")
    (tmp_path / "outputs" / "100.qrs").write_bytes(b"y" * 10)
    long = message(tmp_path, FILES, ("100",), [qrs("100.qrs", b"y" * 5000, kept=10)])
    assert long.splitlines()[1:] == ["  submitted outputs/100.qrs: 10 bytes", "  produced 100.qrs: 5000 bytes",
                                     "  they agree on the first 10 bytes, the most the judge keeps of a result file"]


def test_first_difference_reads_only_up_to_it(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"\0" * (1 << 20))
    assert first_difference(big, b"\0" * (1 << 20)) is None
    assert first_difference(big, b"\0" * 70000 + b"\1") == 70000
    assert first_difference(big, b"\0" * 10) == 10
    assert first_difference(big, b"\0" * ((1 << 20) + 5)) == 1 << 20


def test_numbers_that_differ_only_in_their_last_digits_are_told_apart_from_other_answers():
    """#41: libm and BLAS pick code by CPU feature, so the same program's last digits move."""
    assert numbers_only(b"0.7071067811865476", b"0.7071067811865475")
    assert numbers_only(b"a103l,0.25,1.0000001e-03\n", b"a103l,0.2500000000001,1e-03\n")
    assert numbers_only(b"12", b"12.0")  # printed otherwise, the same number
    assert not numbers_only(b"1", b"-1")  # heart2016's labels: another answer, not rounding
    assert not numbers_only(b"3", b"4") and not numbers_only(b"N", b"A")
    assert not numbers_only(b"0.5,x", b"0.5,y") and not numbers_only(b"0.5", b"0.5")
    assert not numbers_only(b"1 2", b"1 2 3") and not numbers_only(b"nan", b"0.1")


def outcome(tmp_path: Path, rule: ResultsRule, files: dict[str, FileResult], level: str | None) -> str:
    """The quiz's whole verdict for one record, as the participant's report shows it."""
    compare = Comparison(Ctx(Challenge(name="c", directory=tmp_path, results=rule), tmp_path), ("r1",))
    cmd = CommandResult(index=0, name="next.sh r1", status="ok", exit_code=0)
    cmd.files.update(files)
    assert compare.on_end(cmd)
    hardware = {"guest_cpu": {"setting": "max", "level": level}} if level else None
    run = JobRun(domain="d", transcript=Transcript(nonce="n", commands=[cmd]), iso_sha256="", boot_seconds=0,
                 total_seconds=0, hardware=hardware)
    return _outcome(StageCtx(Challenge(name="c", directory=tmp_path, results=rule), tmp_path), run, compare).message


@dataclass
class StageCtx(Ctx):
    def manifest(self, stage: str, run: JobRun) -> dict:
        return {}


def test_a_mismatch_in_last_digits_says_the_cpu_can_cause_it_and_names_the_replica(tmp_path):
    (tmp_path / "answers.txt").write_bytes(b"r1,0.333333333333333\n")
    said = outcome(tmp_path, ResultsRule(), sheet(b"r1,0.3333333333333332\n"), "x86-64-v3")
    assert ("Only numbers differ, in their last digits: CPU differences can cause this, as maths libraries pick "
            "their code by CPU feature (the judge's VMs give x86-64-v3); make the submitted outputs with the "
            "judge's replica on a machine of that level, or round them.") in said.splitlines()
    (tmp_path / "answers.txt").write_bytes(b"r1,N\n")
    assert "Only numbers differ" not in outcome(tmp_path, ResultsRule(), sheet(b"r1,A\n"), "x86-64-v3")
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "r1.qrs").write_bytes(b"1 0.1000000000000001\n2 0.2\n")
    rule = ResultsRule(style="files", pattern="{record}.qrs", submitted="outputs/{record}.qrs")
    said = outcome(tmp_path, rule, qrs("r1.qrs", b"1 0.1\n2 0.2\n"), None)
    assert "Only numbers differ, in their last digits" in said and "the CPU level its replica names" in said
    assert "Only numbers differ" not in outcome(tmp_path, rule, qrs("r1.qrs", b"1 0.1\n3 0.2\n"), None)
