"""The `vmjudge` command line: parse, call, print. Errors become one sentence and exit 1.

Each subcommand's module is imported when that command runs (or when --help lists it), as click's
documentation shows for large command lines: importing every module of vmjudge took 0.5 s before
any command did anything, more than `vmjudge status` and `entries` may take at 100,000 entries
(issue 36), and the test suite runs the command line hundreds of times."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import click

from .. import __version__
from ..terminal import PrintableFormatter
from .echo import errors_printed

# command -> (module of vmjudge.cli, the click command's name in it)
COMMANDS = {
    "carry": ("phases", "carry"), "challenge": ("challenge", "challenge"), "daemon": ("judge", "daemon"),
    "doctor": ("upkeep", "doctor"), "entries": ("entries", "entries"), "evaluate": ("judge", "evaluate"),
    "gc": ("upkeep", "gc"), "gpu": ("gpu", "gpu"), "image": ("image", "image"),
    "leaderboard": ("leaderboard", "leaderboard_cmd"), "logs": ("entries", "logs"), "notify": ("notify", "notify"),
    "owner": ("owners", "owner"), "phases": ("phases", "phases"), "promote": ("phases", "promote"),
    "publish": ("phases", "publish"), "reasons": ("reasons", "reasons"), "replica": ("replica", "replica"),
    "rescore": ("rescore", "rescore"),
    "service": ("service", "service"), "setup-host": ("setup_host", "setup_host"), "show": ("show", "show"),
    "status": ("status", "status"),
    "submit": ("judge", "submit"), "team": ("teams", "team"), "usage": ("usage", "usage"), "web": ("web", "web"),
}


class _Cli(click.Group):
    """Errors of every subcommand, and of parsing the command line, are printed by echo.py; the
    subcommands are COMMANDS, each loaded when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        assert isinstance(command, click.Command) and command.name == cmd_name, (cmd_name, command)
        return command

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with errors_printed():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with errors_printed():
            return super().invoke(ctx)


@click.group(cls=_Cli)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), envvar="VMJUDGE_HOME",
              help="State directory (images, queue, results). Default: /var/lib/vmjudge as root, else ~/.vmjudge.")
@click.option("-v", "--verbose", is_flag=True, help="Log what the supervisor does.")
@click.version_option(__version__)
@click.pass_context
def main(ctx: click.Context, home: Path | None, verbose: bool) -> None:
    """Evaluate code-execution challenge entries in network-less VMs."""
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    ctx.obj = home
