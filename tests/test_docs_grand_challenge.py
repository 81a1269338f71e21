"""docs/grand-challenge.md ("Coming from Grand Challenge", #55): the commands its last section shows are
run as written, in a home of their own, with the archive they name made as the template's do_save.sh
names it: the example challenge is added, and the participant's upload of that archive is queued in the
sanity phase. No VM is booted (the home shares the test image, which challenge add would otherwise build)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path

from . import oci_images as oci
from .cli import REPO, run_cli
from .oci_images import Image, Layer

PAGE = REPO / "docs" / "grand-challenge.md"


def commands() -> list[list[str]]:
    block = PAGE.read_text().split("```sh\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


def test_the_pages_commands_add_the_challenge_and_queue_a_template_named_archive(site, image):
    home = Path(tempfile.mkdtemp(prefix="docs-gc-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)
    try:
        shown = commands()
        assert [c[:2] for c in shown] == [["vmjudge", "challenge"], ["vmjudge", "submit"]]
        archive = home / shown[1][3]
        assert archive.name.startswith("example-algorithm-sanity_") and archive.name.endswith(".tar.gz")
        oci.docker_save(archive, Image([Layer.of([oci.directory("app"), oci.file("app/run.sh", b"true\n")])],
                                       cmd=["/bin/sh", "/app/run.sh"], user="1000"), compress=True)
        added = run_cli(*shown[0][1:], home=home)
        assert added.returncode == 0, added.stderr
        assert "registered hecktor2025-task1" in added.stdout
        queued = run_cli(*[str(archive) if word == archive.name else word for word in shown[1][1:]], home=home)
        assert queued.returncode == 0, queued.stderr
        entry = json.loads(run_cli("show", queued.stdout.strip(), "--json", home=home).stdout)
        assert (entry["state"], entry["phase"]) == ("queued", "sanity"), entry
    finally:
        shutil.rmtree(home)
