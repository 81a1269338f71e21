"""A submission.csv checked against the record set's submission format, as DrivenData checks one
before it scores it (#60): the same header, every id of the format once, in its order where the
challenge says so, each value of the column's type, and none missing. Each difference is one
sentence naming the first ids or columns that differ; the first difference found is the verdict.

The file is the entry's: it is read from bytes the host holds already (bounded by the command's
file limit), as UTF-8 CSV, and nothing of it is trusted: names and values it gives are shown
cut short and escaped. A column's type is the format's: a column whose values there are all
whole numbers takes whole numbers, one whose values are all numbers takes finite numbers, any
other takes text. Missing values are what pandas reads as missing by default (the scorers of
DrivenData's competitions read submissions with pandas): an empty cell, NaN, NA, null, None, ….
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..config.submission import SubmissionFormat

# pandas.read_csv's default na_values (pandas/_libs/parsers.pyx STR_NA_VALUES), and the empty cell.
MISSING = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                     "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
SHOWN = 5  # ids or columns named in a sentence, before "and N more"


@dataclass(frozen=True)
class Checked:
    """The verdict: `problem` (one sentence) or None, and the rows by id (column -> text) when none."""

    problem: str | None
    rows: dict[str, dict[str, str]] | None = None


def shown(values: list[str], limit: int = SHOWN) -> str:
    """Names from the entry's file, escaped and cut short, the first `limit` of them."""
    said = ", ".join(repr(v[:40])[1:-1] if v.isprintable() else repr(v[:40]) for v in values[:limit])
    return said + (f" and {len(values) - limit} more" if len(values) > limit else "")


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _kind(values: list[str]) -> str:
    def every(test: Callable[[str], bool]) -> bool:
        return all(test(v) for v in values)
    if values and every(_is_int):
        return "whole numbers"
    if values and every(_is_number):
        return "numbers"
    return "text"


# What pandas reads as a whole number and as a number (its C parser): ASCII digits, an optional sign, for a number
# a decimal point and an exponent; never Python's extras ("1_000", Arabic-Indic digits), nor inf or nan.
_INT_RE = re.compile(r"[+-]?[0-9]{1,18}")  # an int64, as pandas reads it: never past int()'s digit limit
_NUMBER_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,4})?")


def _is_int(v: str) -> bool:
    return _INT_RE.fullmatch(v) is not None


def _is_number(v: str) -> bool:
    return _NUMBER_RE.fullmatch(v) is not None and math.isfinite(float(v))


_FITS = {"whole numbers": _is_int, "numbers": _is_number, "text": lambda v: True}


def check_submission(data: bytes, fmt: SubmissionFormat, name: str = "submission.csv",
                     same_order: bool = False, silent: bool = False) -> Checked:
    """`data` (the entry's file) against `fmt`. `silent` (the exam): each sentence says what kind of
    difference it is, with counts and the format's own column names, and nothing the entry wrote."""
    try:
        text = data.decode("utf-8-sig")
        table: list[list[str]] = []
        lines: list[int] = []  # where each row ends in the file, as an editor numbers its lines
        reader = csv.reader(io.StringIO(text, newline=""))
        for row in reader:
            if not row:  # a blank line is no row, as pandas reads it
                continue
            if len(table) > len(fmt.ids) + 1:  # the host holds no more than the format's rows, its header and one
                return Checked(f"{name} has more rows than the format's {len(fmt.ids)} ids.")
            table.append([v.strip(" \t") for v in row])  # what pandas' parser strips around a number
            lines.append(reader.line_num)
    except UnicodeDecodeError as exc:
        return Checked(f"{name} is not UTF-8 text" + ("" if silent else f" (byte {exc.start} cannot be read)")
                       + ": write it as UTF-8 CSV.")
    except csv.Error as exc:
        return Checked(f"{name} cannot be read as CSV" + ("" if silent else f" ({exc})") + ".")
    if not table:
        return Checked(f"{name} is empty: it needs the header {', '.join(fmt.columns)} and one row per id.")
    header = table[0]
    if header != list(fmt.columns):
        return Checked(f"{name}'s header is not the format's: {', '.join(fmt.columns)}." if silent else
                       _header(name, header, fmt))
    bad_rows = [n for n, row in enumerate(table[1:], start=1) if len(row) != len(header)]
    if bad_rows and silent:
        return Checked(f"{name} has {counted(len(bad_rows), 'line')} with more or fewer values than its header.")
    if bad_rows:
        return Checked(f"{name} line {lines[bad_rows[0]]} has {len(table[bad_rows[0]])} values, not the header's "
                       f"{len(header)}" + (f" (and {len(bad_rows) - 1} more lines)" if len(bad_rows) > 1 else "") + ".")
    ids = [row[0] for row in table[1:]]
    problem = _ids(name, ids, fmt, same_order, silent)
    if problem:
        return Checked(problem)
    rows = {row[0]: dict(zip(header[1:], row[1:], strict=True)) for row in table[1:]}
    for column in header[1:]:  # missing values first: pandas makes a whole-number column with one a float's
        missing = [i for i in fmt.ids if rows[i][column] in MISSING]
        if missing:
            return Checked(f"{name} has missing values (empty or NaN) in column {column} for {len(missing)} "
                           f"id{'s' if len(missing) > 1 else ''}" + ("" if silent else f": {shown(missing)}")
                           + ". Fill every value.")
    for column in header[1:]:
        kind = _kind([r[column] for r in fmt.rows.values()])
        wrong = [i for i in fmt.ids if not _FITS[kind](rows[i][column])]
        if wrong and silent:
            return Checked(f"{name}'s column {column} must hold {kind}, as the submission format's does, and "
                           f"{len(wrong)} of its values {'does' if len(wrong) == 1 else 'do'} not.")
        if wrong:
            return Checked(f"{name}'s column {column} must hold {kind}, as the submission format's does, and has "
                           f"{shown([rows[i][column] for i in wrong[:1]])} for id {shown(wrong[:1])}"
                           + (f" ({len(wrong) - 1} more ids too)" if len(wrong) > 1 else "") + ".")
    return Checked(None, {i: rows[i] for i in fmt.ids})


def _header(name: str, header: list[str], fmt: SubmissionFormat) -> str:
    want = list(fmt.columns)
    given, wanted = set(header), set(want)  # sets: the entry's header may be as long as its file
    missing = [c for c in want if c not in given]
    extra = [c for c in dict.fromkeys(header) if c not in wanted]
    if not missing and not extra:
        if len(given) != len(header):
            return f"{name}'s header names a column twice: {shown(header)}; the format's is {', '.join(want)}."
        return (f"{name}'s columns are {shown(header, 20)}, not in the format's order {', '.join(want)}: "
                "write them in that order.")
    said = [f"lacks {shown(missing)}" if missing else "", f"has {shown(extra)}, which the format has not" if extra
            else ""]
    return f"{name}'s header {' and '.join(s for s in said if s)}: the columns must be {', '.join(want)}."


def _ids(name: str, ids: list[str], fmt: SubmissionFormat, same_order: bool, silent: bool) -> str | None:
    seen: set[str] = set()
    twice = [i for i in ids if i in seen or seen.add(i)]  # type: ignore[func-returns-value]
    missing = [i for i in fmt.ids if i not in seen]
    extra = [i for i in dict.fromkeys(ids) if i not in fmt.rows]
    if silent:  # the first kind of difference, with its count alone: each count said is a channel out of the exam
        if twice:
            return f"{name} has {counted(len(twice), 'id')} more than once."
        if missing:
            return f"{name} lacks {len(missing)} of the format's {len(fmt.ids)} ids."
        if extra:
            return f"{name} has {counted(len(extra), 'id')} the format has not."
        if same_order and ids != list(fmt.ids):
            return f"{name}'s rows are not in the format's order: keep the format's order of rows."
        return None
    if twice:
        return f"{name} gives the id{'s' if len(twice) > 1 else ''} {shown(twice)} more than once: one row per id."
    if missing:
        return (f"{name} lacks {len(missing)} of the format's {len(fmt.ids)} ids: {shown(missing)}. Write one row "
                "for every id of submission_format.csv.")
    if extra:
        return f"{name} has {counted(len(extra), 'id')} the format has not: {shown(extra)}."
    if same_order and ids != list(fmt.ids):
        at = next(n for n, (a, b) in enumerate(zip(ids, fmt.ids, strict=True)) if a != b)
        return (f"{name}'s row {at + 1} is id {shown([ids[at]])} where the format has {shown([fmt.ids[at]])}: keep "
                "the format's order of rows.")
    return None
