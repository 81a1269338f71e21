"""What the participant is shown at a quiz mismatch (#16): both sides. For answer lines, the
submitted line and the produced one (or that it is missing); for result files, both sizes and
the bytes of each around the first difference, bounded however large the files. Only the
training record's own bytes appear: the quiz never sees a test record."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vmjudge.config import Challenge, ResultsRule
from vmjudge.stages.quiz.mismatch import EXCERPT, first_difference
from vmjudge.stages.quiz.stage import Comparison
from vmjudge.vm.channel import CommandResult, FileResult


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
