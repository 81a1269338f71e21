"""Several hosts judge with the same bits: `challenge add` records a challenge's part hashes and
its image's, a second host's copy is recorded when equal and refused (saying what differs) when
not, and a daemon claims only challenges whose local copy and image match. On a real PostgreSQL
queue, with stand-in images in build.py's format (no image is built)."""

from __future__ import annotations

import shutil

import pytest

from vmjudge.cli.hosts import register
from vmjudge.config import load_challenge
from vmjudge.errors import VmjudgeError
from vmjudge.queue.db import Queue
from vmjudge.supervisor.environment import Environment, manifest_sha256, mismatch

from .test_image_transfer import challenge, fake_image, home


@pytest.fixture
def hosts(tmp_path, pg_url):
    """Two homes on one queue; the challenge registered from the first, copied to the second."""
    ch = challenge(tmp_path / "c1")
    (ch / "test").mkdir()
    (ch / "test" / "RECORDS").write_text("t1\n")
    first, second = home(tmp_path / "judge1"), home(tmp_path / "judge2")
    image = fake_image(first, ch)
    a, b = Queue(pg_url, host="judge1"), Queue(pg_url, host="judge2")
    assert register(first, a, load_challenge(ch), [image], replace=False) == "registered c1"
    copy = tmp_path / "copy" / "c1"
    shutil.copytree(ch, copy)
    shutil.copytree(image.directory, second.layout.images / image.key)  # as `image import` leaves it
    return first, second, a, b, ch, copy, image


def row(queue):
    [found] = queue.challenges()
    return found


def test_an_equal_copy_is_recorded_as_the_second_hosts_and_judged_there(hosts):
    first, second, a, b, ch, copy, image = hosts
    said = register(second, b, load_challenge(copy), [image], replace=False)
    assert said == f"this host's copy of c1 at {copy} matches the one registered"
    assert row(b)["here"] == str(copy) and row(a)["here"] == str(ch)  # each host its own copy
    assert mismatch(second, row(b)) is None and Environment(second, b).allowed() == ("c1",)


def test_a_copy_that_differs_is_refused_saying_which_part_and_replace_makes_it_the_one(hosts):
    first, second, a, b, ch, copy, image = hosts
    (copy / "test" / "RECORDS").write_text("t1\nt2\n")
    (copy / "extra.txt").write_text("x")
    with pytest.raises(VmjudgeError, match=r"^c1 is registered in the shared queue with other files than .*c1 "
                                           r"\(extra.txt is not in the registered copy; test/ differs\): copy the "
                                           r"challenge from the host that registered it, or give --replace"):
        register(second, b, load_challenge(copy), [image], replace=False)
    b.add_copy("c1", copy)  # the organiser pointed the second host at its copy anyway
    assert mismatch(second, row(b)) == (f"challenge c1: this host's copy at {copy} is not the one registered "
                                        "(extra.txt is not in the registered copy; test/ differs): copy it again "
                                        "from the host that registered it")
    assert Environment(second, b).allowed() == ()  # it takes none of c1's stages
    assert Environment(first, a).allowed() == ("c1",)
    register(second, b, load_challenge(copy), [image], replace=True)
    assert Environment(second, b).allowed() == ("c1",) and Environment(first, a).allowed() == ()


def test_another_image_or_none_keeps_a_host_off_the_challenge(hosts, tmp_path):
    first, second, a, b, ch, copy, image = hosts
    b.add_copy("c1", copy)
    shutil.rmtree(second.layout.images / image.key)
    assert mismatch(second, row(b)).startswith("challenge c1: the guest image for this challenge is not built")
    other = fake_image(second, copy, root=b"hsqs another build")  # the same recipe, built again here
    assert mismatch(second, row(b)) == (
        f"challenge c1: this host's copy at {copy} is not the one registered (the image differs "
        f"({manifest_sha256(other)[:12]} here, {row(b)['image_sha256'][:12]} registered: copy it with "
        "`vmjudge image export` and `vmjudge image import`)): copy it again from the host that registered it")


def test_a_host_without_a_copy_is_told_where_it_looked(hosts, tmp_path):
    first, second, a, b, ch, copy, image = hosts
    b.add_copy("c1", tmp_path / "nowhere")
    assert mismatch(second, row(b)).startswith(f"challenge c1: this host has no copy at {tmp_path / 'nowhere'}: "
                                               "copy the challenge directory there")
