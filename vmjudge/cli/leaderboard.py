"""`vmjudge leaderboard`: a board as participants see it (each entry from its exam's publish
time; a contest phase's hidden board refused until the phase is published), or the
organiser's at once; as text, JSON, CSV or a self-contained HTML page (reports/leaderboard.py
writes them). Kept apart from main.py so that each stays one screenful of commands."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from ..config import load_challenge
from ..errors import VmjudgeError
from ..queue.rows import now
from ..reports import leaderboard as lb
from ..reports import participant
from ..reports.phase_view import PhaseViews, board_phase, hidden_board
from .echo import echo
from .home import queue_of, site_of


@click.command("leaderboard")
@click.argument("challenge_name")
@click.option("--late", is_flag=True, help="The board of late entries.")
@click.option("--phase", default=None, help="A contest's phase (default: the latest that has opened).")
@click.option("--json", "as_json", is_flag=True, help="Print the board as JSON.")
@click.option("--csv", "csv_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the board to FILE as CSV.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the board to FILE as a self-contained HTML page.")
@click.option("--organiser", is_flag=True, help="Every scored entry at once (not from its publish time), and in "
                                                "JSON each row's exam host and hardware: not for publishing.")
@click.pass_context
def leaderboard_cmd(ctx: click.Context, challenge_name: str, late: bool, phase: str | None, as_json: bool,
                    csv_file: Path | None, html_file: Path | None, organiser: bool) -> None:
    """Each owner's best scored entry, best first; ties go to the earlier submission. An entry counts from
    its publish time on, as participants see it, unless --organiser; a phase's hidden board is refused
    until the phase is published, unless --organiser."""


    if as_json + (csv_file is not None) + (html_file is not None) > 1:
        raise VmjudgeError("--json, --csv and --html each choose the output: give only one of them.")
    queue = queue_of(site_of(ctx))
    directory = queue.challenge_dir(challenge_name)
    at = participant.now()
    lower = False
    if phase is not None or (directory / "challenge.toml").is_file():  # a board needs no copy of the challenge
        ch = load_challenge(directory)
        phase, lower = board_phase(ch, phase, at), ch.lower_first
    if not organiser and not PhaseViews.load(queue).board_shown(challenge_name, phase, at):
        raise VmjudgeError(f"{hidden_board(challenge_name, str(phase)).rstrip('.')} (`vmjudge publish "
                           f"{challenge_name} --phase {phase}` publishes it; --organiser shows it to you now).")
    rows = lb.leaderboard(queue, challenge_name, late, at=None if organiser else at, phase=phase, lower_first=lower)
    if csv_file is not None:
        lb.write_file(csv_file, lb.as_csv(rows))
    elif html_file is not None:
        lb.write_file(html_file, lb.as_html(challenge_name, rows, late, generated_at=now(), phase=phase))
    elif as_json:
        echo(json.dumps([asdict(r) for r in rows] if organiser else participant.board_rows(rows), indent=2))
    else:
        echo(lb.as_text(challenge_name, rows, late, phase), nl=False)
        if organiser:
            for line in lb.exam_lines(rows):
                echo(line)
