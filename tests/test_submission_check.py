"""A submission.csv against its submission format (#60, stages/submission_check.py): every
difference DrivenData's format check catches, each named in one sentence by its first ids or
columns (the quiz), or by its kind and counts alone (the silent exam: nothing the entry wrote)."""

from __future__ import annotations

import pytest

from vmjudge.config.submission import read_format
from vmjudge.errors import ConfigError
from vmjudge.stages.submission_check import check_submission

FORMAT = "id,label,p\n" + "".join(f"r{i},0,0.5\n" for i in range(1, 8))


@pytest.fixture
def fmt(tmp_path):
    path = tmp_path / "submission_format.csv"
    path.write_text(FORMAT)
    return read_format(path)


def good(n: int = 7) -> str:
    return "id,label,p\n" + "".join(f"r{i},{i % 2},{i / 10}\n" for i in range(1, n + 1))


def test_a_submission_that_matches_gives_its_rows_by_id(fmt):
    checked = check_submission(good().encode(), fmt)
    assert checked.problem is None
    assert checked.rows["r3"] == {"label": "1", "p": "0.3"} and list(checked.rows) == list(fmt.ids)


def test_a_header_as_long_as_the_file_is_checked_at_once_and_names_each_extra_column_once(fmt):
    header = "id,label,p," + ",".join(["x"] * 2_000_000 + [f"c{i}" for i in range(1000)])
    said = check_submission((header + "\n").encode(), fmt).problem
    assert said == "submission.csv's header has x, c0, c1, c2, c3 and 996 more, which the format has not: the " \
        "columns must be id, label, p."


def test_rows_in_another_order_pass_unless_the_challenge_wants_the_formats(fmt):
    lines = good().splitlines()
    shuffled = "\n".join([lines[0], *reversed(lines[1:])]) + "\n"
    assert check_submission(shuffled.encode(), fmt).problem is None
    said = check_submission(shuffled.encode(), fmt, same_order=True).problem
    assert said == "submission.csv's row 1 is id r7 where the format has r1: keep the format's order of rows."


@pytest.mark.parametrize(("text", "quiz", "exam"), [
    ("id,label\n" + "".join(f"r{i},0\n" for i in range(1, 8)),
     "submission.csv's header lacks p: the columns must be id, label, p.",
     "submission.csv's header is not the format's: id, label, p."),
    ("id,label,p,extra\n" + "".join(f"r{i},0,0.1,x\n" for i in range(1, 8)),
     "submission.csv's header has extra, which the format has not: the columns must be id, label, p.",
     "submission.csv's header is not the format's: id, label, p."),
    ("id,p,label\n" + "".join(f"r{i},0.1,0\n" for i in range(1, 8)),
     "submission.csv's columns are id, p, label, not in the format's order id, label, p: write them in that order.",
     "submission.csv's header is not the format's: id, label, p."),
    (good(5), "submission.csv lacks 2 of the format's 7 ids: r6, r7. Write one row for every id of "
     "submission_format.csv.", "submission.csv lacks 2 of the format's 7 ids."),
    (good() + "zz9,0,0.1\n", "submission.csv has 1 id the format has not: zz9.",
     "submission.csv has 1 id the format has not."),
    (good() + "r2,0,0.1\n", "submission.csv gives the id r2 more than once: one row per id.",
     "submission.csv has 1 id more than once."),
    (good().replace("r3,1,0.3", "r3,1,NaN").replace("r5,1,0.5", "r5,1,"),
     "submission.csv has missing values (empty or NaN) in column p for 2 ids: r3, r5. Fill every value.",
     "submission.csv has missing values (empty or NaN) in column p for 2 ids. Fill every value."),
    (good().replace("r4,0,0.4", "r4,leak-AF,0.4"),
     "submission.csv's column label must hold whole numbers, as the submission format's does, and has leak-AF "
     "for id r4.",
     "submission.csv's column label must hold whole numbers, as the submission format's does, and 1 of its "
     "values does not."),
    (good().replace("r4,0,0.4", "r4,0,inf"),
     "submission.csv's column p must hold numbers, as the submission format's does, and has inf for id r4.",
     "submission.csv's column p must hold numbers, as the submission format's does, and 1 of its values does not."),
    (good().replace("r4,0,0.4", "r4,0"),
     "submission.csv line 5 has 2 values, not the header's 3.",
     "submission.csv has 1 line with more or fewer values than its header."),
    (good().replace("r4,0,0.4", "\n\nr4,0"),  # the line as an editor numbers it, blank lines counted
     "submission.csv line 7 has 2 values, not the header's 3.",
     "submission.csv has 1 line with more or fewer values than its header."),
    (good(5) + "zz8,0,0.1\nzz9,0,0.1\nr1,0,0.1\n",  # three kinds of difference; the exam counts the first alone
     "submission.csv gives the id r1 more than once: one row per id.",
     "submission.csv has 1 id more than once."),
    ("", "submission.csv is empty: it needs the header id, label, p and one row per id.",
     "submission.csv is empty: it needs the header id, label, p and one row per id."),
])
def test_each_difference_is_one_sentence_and_the_exams_says_nothing_the_entry_wrote(fmt, text, quiz, exam):
    assert check_submission(text.encode(), fmt).problem == quiz
    said = check_submission(text.encode(), fmt, silent=True).problem
    assert said == exam
    for written in ("zz9", "leak-AF", "inf", "r6", "r3", "r2", "extra"):  # nothing of the entry's in the exam's
        assert written not in said


def test_bytes_that_are_not_utf8_are_said_so(fmt):
    assert check_submission(b"id,label,p\nr1,\xff,0.1\n", fmt).problem == \
        "submission.csv is not UTF-8 text (byte 14 cannot be read): write it as UTF-8 CSV."
    assert check_submission(b"id,label,p\nr1,\xff,0.1\n", fmt, silent=True).problem == \
        "submission.csv is not UTF-8 text: write it as UTF-8 CSV."


def test_what_the_entry_wrote_is_shown_escaped_and_cut_short(fmt):
    said = check_submission((good() + "\x1b[2Jevil" + "x" * 500 + ",0,0.1\n").encode(), fmt).problem
    assert "\x1b" not in said and "\\x1b" in said and len(said) < 200


@pytest.mark.parametrize(("text", "said"), [
    ("id\nr1\n", "needs a header of at least two columns"),
    ("id,p,p\nr1,0,0\n", "names a column twice"),
    ("id,p\nr1,0\nr1,1\n", "line 3 repeats the id 'r1'"),
    ("id,p\nr1\n", "line 2 has 1 values, not the header's 2"),
    ("id,p\n", "has a header and no rows"),
])
def test_an_organisers_format_that_cannot_be_used_is_refused_at_challenge_add(tmp_path, text, said):
    path = tmp_path / "submission_format.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=said):
        read_format(path)


@pytest.mark.parametrize("value", ["1_000", "\u0661", "0x1", "1.5", "true"])
def test_a_whole_number_is_what_pandas_reads_as_one_not_what_python_int_takes(fmt, value):
    said = check_submission(good().replace("r4,0,0.4", f"r4,{value},0.4").encode(), fmt).problem
    assert said is not None and "column label must hold whole numbers" in said


@pytest.mark.parametrize("value", [" 1", "+1", "-0"])
def test_a_whole_number_with_a_sign_or_spaces_around_it_is_one(fmt, value):
    assert check_submission(good().replace("r4,0,0.4", f"r4,{value},0.4").encode(), fmt).problem is None


@pytest.mark.parametrize("value", ["1\x1f", "9" * 5000, "0" * 4400 + "1"])
def test_nothing_the_check_lets_through_can_break_the_scorers_int(fmt, value):
    """A value the check takes is one int() takes too: the scorer never fails on the entry's text (which would
    be the judge's failure, retried), found by an attacker's review."""
    checked = check_submission(good().replace("r4,0,0.4", f"r4,{value},0.4").encode(), fmt)
    assert checked.problem is not None or all(int(r["label"]) in (0, 1) for r in checked.rows.values())


def test_the_host_holds_no_more_rows_than_the_format_has(fmt):
    said = check_submission(b"\n" * (1 << 20) + good().encode() + b"r1,0,0.1\n" * 100000, fmt, silent=True)
    assert said.problem == "submission.csv has more rows than the format's 7 ids."
