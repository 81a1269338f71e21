"""The evaluation image's root (#56, images/evaluation_root.py) on the host, with the real skopeo,
umoci and mksquashfs: admission reads the organiser's archive once, and a stage 4 whose archive is
unchanged finds the root by what that reading found, reading no byte of it; an archive written
since, a root gc removed, or a lower [score] max_unpacked reads it again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vmjudge.archive import container_image
from vmjudge.config.evaluation import EvaluationRules
from vmjudge.config.layout import Layout
from vmjudge.errors import ChallengeError
from vmjudge.images import evaluation_root as module
from vmjudge.images.evaluation_root import evaluation_root

from . import oci_images as oci
from .needs import root_making_tools
from .oci_images import Image, Layer, file


@pytest.fixture
def counted(monkeypatch):
    """How many times admission reads an archive."""
    calls: list[Path] = []

    def check_image(path, *args, **kw):
        calls.append(Path(path))
        return container_image.check_image(path, *args, **kw)
    monkeypatch.setattr(module, "check_image", check_image)
    return calls


def test_the_archive_is_read_once_while_it_and_its_root_stay(tmp_path, counted):
    root_making_tools()
    layout = Layout(tmp_path / "home")
    archive = oci.docker_save(tmp_path / "evaluation.tar", Image([Layer.of([file("opt/e.py", b"print(1)\n" * 50)])],
                                                                 cmd=["python3", "/opt/e.py"]))
    rules = EvaluationRules(image=archive, metric="score")
    first = evaluation_root(layout, rules)
    again = evaluation_root(layout, rules)
    assert len(counted) == 1 and again.reused and (again.path, again.digest) == (first.path, first.digest)
    assert (again.config, again.image_id) == (first.config, first.image_id)
    assert again.config.command == ("python3", "/opt/e.py")

    os.utime(archive)  # written since (the same bytes): read again
    evaluation_root(layout, rules)
    assert len(counted) == 2
    evaluation_root(layout, rules)
    assert len(counted) == 2

    first.path.unlink()  # gc took the root: read again, and made again
    remade = evaluation_root(layout, rules)
    assert len(counted) == 3 and not remade.reused and remade.path.is_file()

    smaller = EvaluationRules(image=archive, metric="score", max_unpacked=100)  # what was found no longer fits
    with pytest.raises(ChallengeError, match="is refused"):
        evaluation_root(layout, smaller)
    assert len(counted) == 4

    layout.evaluation_check(archive).write_text("{not json")  # a memo that cannot be read: read again
    evaluation_root(layout, rules)
    assert len(counted) == 5
