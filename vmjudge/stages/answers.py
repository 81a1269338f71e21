"""Reading what next.sh answered: "RECORD,LABEL" lines in answers.txt, or one file per record."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path


def parse_answer_lines(data: bytes | None) -> dict[str, str]:
    """RECORD -> LABEL from answers.txt; a later line for the same record replaces an earlier
    one, and lines that are not RECORD,LABEL are ignored (they cannot match anything)."""
    answers: dict[str, str] = {}
    if not data:
        return answers
    for line in data.decode("utf-8", "replace").splitlines():
        record, sep, label = line.strip().partition(",")
        if sep and record.strip():
            answers[record.strip()] = label.strip()
    return answers


def read_answer_lines(path: Path) -> dict[str, str]:
    """parse_answer_lines for a file, read line by line (prep has bounded its size)."""
    answers: dict[str, str] = {}
    if not path.is_file():
        return answers
    with open(path, "rb") as f:
        for raw in f:  # UTF-8 never puts a newline byte inside a character: the same text, line by line
            answers.update(parse_answer_lines(raw))
    return answers


def refused_line(path: Path, records: Collection[str], problem: Callable[[str], str | None]) -> str | None:
    """The first line of answers.txt whose answer, for one of `records`, the challenge's
    scorer refuses (`problem` says why), as "line N (RECORD,LABEL): why"; None when there is
    none. Only the line that counts for a record (its last) is judged; an empty answer is no
    answer, which every scorer accepts."""
    last: dict[str, tuple[int, str]] = {}
    if path.is_file():
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                for record, label in parse_answer_lines(raw).items():
                    if record in records:
                        last[record] = (number, label)
    bad = sorted((number, record, label, why) for record, (number, label) in last.items()
                 if label and (why := problem(label)) is not None)
    if not bad:
        return None
    number, record, label, why = bad[0]
    return f"line {number} ({record},{label}): {why}"
