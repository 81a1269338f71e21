"""The command line loads a subcommand's module only when that command runs (cli/main.py): every
command is still there, under its own name, and `status` does not pay for the daemon, the portal
or the image builder (0.5 s of imports before, more than status at 100,000 entries may take)."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from vmjudge.cli.main import COMMANDS, main

from .cli import REPO, run_cli

# Modules `vmjudge status` has no use for, each the root of a large part of vmjudge's imports.
HEAVY = ("vmjudge.supervisor.daemon", "vmjudge.web.app", "vmjudge.images.build", "vmjudge.supervisor.doctor")


def test_every_command_loads_under_its_name():
    with click.Context(main) as ctx:
        for name in main.list_commands(ctx):
            command = main.get_command(ctx, name)
            assert isinstance(command, click.Command) and command.name == name
            assert command.help, name  # what --help says of it
        assert main.get_command(ctx, "no-such-command") is None
    assert main.list_commands(ctx) == sorted(COMMANDS) and len(COMMANDS) >= 24


def test_help_lists_every_command_and_an_unknown_one_is_a_clear_error(tmp_path):
    listed = run_cli("--help", home=tmp_path).stdout
    assert all(f"  {name} " in listed for name in COMMANDS), listed
    wrong = run_cli("stauts", home=tmp_path)
    assert wrong.returncode == 2 and "No such command 'stauts'" in wrong.stderr


def test_status_imports_neither_the_daemon_nor_the_portal(tmp_path):
    script = ("import json, sys\nfrom vmjudge.cli.main import main\n"
              "try:\n    main(['--home', sys.argv[1], 'status', '--json'])\n"
              "except SystemExit:\n    pass\n"
              f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert json.loads(proc.stdout)["active"] == []
    loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    assert loaded == dict.fromkeys(HEAVY, False), loaded
