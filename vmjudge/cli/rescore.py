"""`vmjudge rescore`: the command line of supervisor/rescore.py (parse, call, print), kept
apart from main.py so the command stays one small module."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import VmjudgeError
from ..supervisor import rescore as rs
from .echo import echo
from .home import site_and_queue


def _ids(values: tuple[str, ...]) -> list[int]:
    """--entries 3 --entries 4,5 "6 7": every id, in order."""
    ids = []
    for value in values:
        for part in value.replace(",", " ").split():
            if not part.isdigit():
                raise VmjudgeError(f"--entries {value!r} is not a list of entry ids: give numbers such as "
                                   "--entries 3,4,5.")
            ids.append(int(part))
    return ids


class _Progress:
    """A progress bar on stderr, started on the first report (when the total is known)."""

    def __init__(self) -> None:
        self.bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=total, label="re-scoring", file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


@click.command("rescore")
@click.argument("challenge_name")
@click.option("--entries", "entries", multiple=True, metavar="ID…",
              help="Only these entries (repeat, or separate ids with commas).")
@click.option("--late", is_flag=True, help="The late entries instead of the official ones.")
@click.option("--all", "all_", is_flag=True, help="Official and late entries.")
@click.option("--phase", default=None, help="A contest's phase: its entries, against its reference.")
@click.option("--scorer", default=None, metavar="NAME|module:function",
              help="Score with this scorer instead of the challenge's (also path/to/file.py:function).")
@click.option("--reference", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Score against this reference directory instead of the challenge's.")
@click.option("--rerun-stages", is_flag=True, help="Queue the entries again from stage 1 for the daemon.")
@click.option("--json", "as_json", is_flag=True, help="Print every entry's old and new scores as JSON.")
@click.option("--csv", "csv_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write every entry's old and new scores to this CSV file.")
@click.pass_context
def rescore(ctx: click.Context, challenge_name: str, entries: tuple[str, ...], late: bool, all_: bool,
            phase: str | None, scorer: str | None, reference: Path | None, rerun_stages: bool, as_json: bool,
            csv_file: Path | None) -> None:
    """Score CHALLENGE_NAME's entries again from their archived stage-3 results (no VM).

    Each re-scoring is recorded with the scorer version and reference hash it used; the
    previous scores stay in the entry's history (`show --json`). Exit status 0 only when
    every chosen entry was re-scored."""
    if late and all_:
        raise VmjudgeError("--late and --all cannot be used together: --late takes the late entries only, "
                           "--all takes every entry.")
    ids = _ids(entries)
    if ids and (late or all_):
        raise VmjudgeError("--entries chooses the entries itself: leave out --late and --all.")
    if rerun_stages and (scorer or reference):
        raise VmjudgeError("--rerun-stages evaluates the entries again with the challenge's own scorer and "
                           "reference: leave out --scorer and --reference, or re-score without --rerun-stages.")
    if as_json and csv_file:
        raise VmjudgeError("--json and --csv cannot be used together: choose one.")
    which = "all" if all_ else "late" if late else "official"
    site, queue = site_and_queue(ctx)
    progress = _Progress() if sys.stderr.isatty() and not as_json else None
    try:
        if rerun_stages:
            report = rs.rerun(site, queue, challenge_name, ids, which, progress=progress, phase=phase)
        else:
            report = rs.rescore(site, queue, challenge_name, ids, which, scorer, reference, progress=progress,
                                phase=phase)
    finally:
        if progress is not None:
            progress.close()
    if as_json:
        echo(json.dumps(report.as_json(), indent=2, sort_keys=True))
    else:
        for outcome in report.entries:
            if progress is None or outcome.status == "refused":  # a terminal gets the bar and the problems
                echo(outcome.line())
        echo(report.summary())
    if csv_file is not None:
        report.write_csv(csv_file)
    sys.exit(0 if report.ok else 1)
