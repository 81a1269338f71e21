"""challenge.toml's [results] and [quiz]: how an entry's results come back for each record, and what
stage 2 demands of them before the exam.

An archive entry answers in answers.txt or a file per record, and a container entry in a file per
record left in its output; each must reproduce, in the quiz, the results it submitted. A container
challenge with sockets (sockets.py) takes each case's outputs by socket instead, and its quiz checks
them (`[quiz] check = "outputs"`) or only that each case ran ("none"), as Grand Challenge's phases
check a submission by running it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .entry import RELPATH_RE, image_results_path
from .sockets import Sockets
from .values import Section


@dataclass(frozen=True)
class ResultsRule:
    """How next.sh answers: a line in answers.txt, or a file per record."""

    style: str = "answer-lines"  # or "files"; "sockets" for a challenge with [[output]] sockets; "table" (submission)
    pattern: str | None = None  # files: what next.sh RECORD leaves, e.g. "{record}.qrs"
    submitted: str = "answers.txt"  # inside the entry: its own answers (or "outputs/{record}.qrs")

    def output_name(self, record: str) -> str:
        return "answers.txt" if self.style == "answer-lines" else str(self.pattern).format(record=record)

    def submitted_path(self, record: str) -> str:
        return self.submitted.format(record=record)

    def stored_path(self, record: str) -> str:
        """Where the host keeps the entry's submitted result for `record`, relative to the entry's
        directory: `submitted_path` itself for an archive; a container entry's path in its image
        (absolute, e.g. "/submitted/{record}.txt") without its leading "/", so that joining it to
        a host directory can never leave that directory."""
        return self.submitted_path(record).lstrip("/")


# A container challenge's [results] unless it says otherwise: a file per record in the output, and
# the entry's own results for the training records at the same names under /submitted in its image.
CONTAINER_RESULTS = ResultsRule(style="files", pattern="{record}.txt", submitted="/submitted/{record}.txt")

# A submission challenge's: one table for the whole set, its rows by id (config/submission.py).
TABLE_RESULTS = ResultsRule(style="table", pattern=None, submitted="")

QUIZ_CHECKS = ("submitted", "outputs", "none")


def quiz_check(source: str, data: dict[str, Any], sockets: Sockets | None, kind: str = "archive") -> str:
    if kind == "submission":  # the quiz is DrivenData's smoke test: the run over the sample, its format checked
        if "quiz" in data:
            raise ConfigError(f"{source}: a submission's quiz checks its submission against the sample's format, "
                              "as DrivenData's smoke test does: remove [quiz].")
        return "outputs"
    sec = Section(source, "quiz", data.get("quiz", {}))
    check = sec.get("check", str, "outputs" if sockets else "submitted", lambda v: v in QUIZ_CHECKS,
                    " or ".join(f'"{c}"' for c in QUIZ_CHECKS))
    sec.done()
    if check != "submitted" and sockets is None:
        raise ConfigError(f"{source}: [quiz] check = \"{check}\" is for a challenge with [[output]] sockets; without "
                          "them the quiz compares each result with the entry's submitted one: remove check.")
    if check == "submitted" and sockets is not None:
        raise ConfigError(f"{source}: [quiz] check = \"submitted\" needs [results] submitted, which a challenge with "
                          "sockets has not: use \"outputs\" (each training case's outputs checked) or \"none\".")
    return str(check)


def results_rule(source: str, data: dict[str, Any], kind: str = "archive",
             sockets: Sockets | None = None) -> ResultsRule:
    if sockets is not None:
        if "results" in data:
            raise ConfigError(f"{source}: a challenge with [[output]] sockets takes each case's results from them: "
                              "remove [results].")
        return ResultsRule(style="sockets", pattern=None, submitted="")
    if kind == "submission":
        if "results" in data:
            raise ConfigError(f"{source}: a submission's results are its submission.csv, read by [submission]: "
                              "remove [results].")
        return TABLE_RESULTS
    sec = Section(source, "results", data.get("results", {}))
    container = kind == "container"
    style = sec.get("style", str, "files" if container else "answer-lines", lambda v: v in ("answer-lines", "files"),
                    "\"answer-lines\" or \"files\"")
    if container and style != "files":
        # Each run of a container entry starts with an empty output, so no answers.txt can grow
        # from one record to the next as next.sh's does.
        raise ConfigError(f"{source}: [results] style = \"{style}\" is for archive entries; a container entry leaves "
                          "one file per record in its output: set style = \"files\" with a pattern such as "
                          "\"{record}.txt\".")
    pattern_ok = "a file name holding {record}, such as \"{record}.qrs\""
    pattern = sec.get("pattern", str, CONTAINER_RESULTS.pattern if container else None,
                      lambda v: "{record}" in v and "/" not in v and bool(RELPATH_RE.fullmatch(v)), pattern_ok)
    if style == "files":
        if pattern is None:
            raise ConfigError(f"{source}: [results] style = \"files\" needs pattern: use {pattern_ok}.")
        if container:
            submitted = sec.get("submitted", str, CONTAINER_RESULTS.submitted, image_results_path,
                                "an absolute path in the image holding {record}, such as "
                                "\"/submitted/{record}.txt\" (not under /proc, /sys or /dev)")
        else:
            submitted = sec.get("submitted", str, None,
                                lambda v: "{record}" in v and bool(RELPATH_RE.fullmatch(v)),
                                "a path inside the entry holding {record}, such as \"outputs/{record}.qrs\"")
        if submitted is None:
            raise ConfigError(f"{source}: [results] style = \"files\" needs submitted, the path of the entry's "
                              "own results, such as \"outputs/{record}.qrs\".")
    else:
        submitted = sec.get("submitted", str, "answers.txt", lambda v: "{" not in v and bool(RELPATH_RE.fullmatch(v)),
                            "a path inside the entry such as \"answers.txt\"")
    sec.done()
    return ResultsRule(style=style, pattern=pattern, submitted=submitted)
