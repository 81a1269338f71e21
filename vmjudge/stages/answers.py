"""Reading what next.sh answered: "RECORD,LABEL" lines in answers.txt, or one file per record."""

from __future__ import annotations


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
