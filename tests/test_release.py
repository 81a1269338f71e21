"""The release an organiser installs (#59): a LICENSE as setup.cfg names it, and one version that
`vmjudge --version`, the package and CHANGELOG.md's newest entry agree on (the stage manifests record it:
tests/test_replica.py)."""

from __future__ import annotations

import re
from pathlib import Path

from vmjudge import __version__

from .cli import run_cli

REPO = Path(__file__).resolve().parent.parent


def test_one_version_everywhere(tmp_path):
    newest = re.search(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), flags=re.M)
    assert newest and newest.group(1) == __version__
    assert run_cli("--version", home=tmp_path).stdout.split()[-1] == __version__


def test_the_licence_is_the_one_setup_cfg_names():
    assert "license = MIT" in (REPO / "setup.cfg").read_text()
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n")
