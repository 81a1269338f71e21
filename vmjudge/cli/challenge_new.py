"""`vmjudge challenge new DIR`: a challenge to start from, checked as `challenge add` will check it
before the author sees it, so that what it writes is known to be accepted."""

from __future__ import annotations

import re
from pathlib import Path

import click

from ..config import check_challenge_data, load_challenge
from ..errors import VmjudgeError
from ..scorers.loader import load_scorer
from .echo import echo
from .starter import SCORERS, TEST, TRAINING, write_starter

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@click.command("new")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--style", type=click.Choice(tuple(SCORERS)), default="answer-lines", show_default=True,
              help="How the entry gives each record's result: a line of answers.txt, or a file per record.")
@click.option("--scorer", default=None,
              help="answer-lines: accuracy (default), af2017, heart2016 or alarms2015; files: dice (default).")
@click.option("--name", default=None, help="The challenge's name (default: the directory's name).")
def challenge_new(directory: Path, style: str, scorer: str | None, name: str | None) -> None:
    """Write a small, complete challenge to DIRECTORY: records, reference answers, a sample entry
    and a challenge.toml with every key commented. `vmjudge challenge add DIRECTORY` accepts it."""
    scorer = scorer or SCORERS[style][0]
    if scorer not in SCORERS[style]:
        raise VmjudgeError(f"--scorer {scorer} has no sample data for style {style}: choose "
                           f"{' or '.join(SCORERS[style])}, then change [score] scorer and the data once it works.")
    name = name or directory.resolve().name
    if not _NAME_RE.fullmatch(name):
        raise VmjudgeError(f"{name!r} is not a challenge name (letters, digits, '.', '_' and '-', at most 64): "
                           "give one with --name.")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise VmjudgeError(f"{directory} exists and is not an empty directory: name a new one.")
    written = write_starter(directory, name, style, scorer)
    challenge = load_challenge(directory)
    check_challenge_data(challenge)
    load_scorer(challenge.scorer, challenge.score_options)
    echo(f"wrote challenge {name} in {directory} (style {style}, scorer {scorer}): {len(TRAINING)} training and "
         f"{len(TEST)} test records, and a sample entry, {written.archive}")
    echo("next:")
    echo(f"  vmjudge challenge add {directory}")
    echo(f"  vmjudge submit {name} {written.archive}")
    echo("  vmjudge daemon --until-idle")
