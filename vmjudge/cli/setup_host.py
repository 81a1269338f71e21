"""`vmjudge setup-host`: the host's Debian packages and libvirt, for an organiser who installed the
wheel rather than cloning (`make setup` runs the same script, vmjudge/host/setup-host)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

SCRIPT = Path(__file__).resolve().parent.parent / "host" / "setup-host"


@click.command("setup-host")
@click.option("--tools", is_flag=True, help="Also install what the tests need (chromium, PostgreSQL, Go, ...).")
def setup_host(tools: bool) -> None:
    """Install the Debian packages judging needs that this host lacks, and start libvirt if it is down
    (as root; quick when all is there)."""
    sys.exit(subprocess.run(["bash", str(SCRIPT), *(["--tools"] if tools else [])]).returncode)
