"""#40's remainder: a phase with a training set and an image of its own, without VMs.

The contest is tests/phased.py's, its sanity phase with three training records of its own (f1-f3)
and python3-numpy in its image, which validation (carried from it) keeps; the test phase adds a
pip package to the image it would otherwise have. Images are stand-ins in build.py's format, put
where `challenge add` and `image build` find them built (no image is built here). What is shown:
`challenge add` and `image build` take every phase's image, the queue records them all and a host
lacking one takes none of the contest's stages; the stages' jobs are the phase's training records;
`vmjudge replica build --phase` carries the phase's training set and names the phase, which the
replica's check then judges in.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from vmjudge.archive.components import Listed, check_components
from vmjudge.cli.hosts import register
from vmjudge.config import ImageRecipe, load_challenge
from vmjudge.errors import EntryError
from vmjudge.images.build import image_key
from vmjudge.queue.db import Queue
from vmjudge.replica.build import replica_files
from vmjudge.replica.check import replica_phase, training_scores
from vmjudge.stages.records import record_job
from vmjudge.supervisor.environment import Environment, images_sha256, manifest_sha256, mismatch

from .cli import run_cli
from .phased import contest_dir, write_training
from .test_image_transfer import fake_image, home
from .test_replica import iso_files
from .test_rescore import NO_VM_ENV

OWN = {"f1": 7, "f2": 8, "f3": 9}
NUMPY = ImageRecipe(packages=("python3-numpy",))
WFDB = ImageRecipe(packages=("python3-numpy",), pip=("wfdb==4.3.1",))


def contest(root):
    directory = contest_dir(root, sanity='training = "phases/sanity/training"\n[phase.image]\n'
                                         'packages = ["python3-numpy"]',
                            test='[phase.image]\npip = ["wfdb==4.3.1"]')
    write_training(directory, "phases/sanity/training", OWN)
    (directory / "phases" / "sanity" / "training" / "REFERENCE.csv").write_text("f1,7\nf2,0\nf3,9\n")
    return directory


def vmjudge(site, *args: str, ok: bool = True, env: dict[str, str] = NO_VM_ENV):
    proc = run_cli(*args, home=site.home, env=env)
    assert (proc.returncode == 0) == ok, proc.stdout + proc.stderr
    return proc


def test_challenge_add_and_image_build_take_every_phases_image(tmp_path):
    directory = contest(tmp_path)
    site = home(tmp_path / "judge")
    numpy, wfdb = fake_image(site, directory, recipe=NUMPY), fake_image(site, directory, recipe=WFDB)
    added = vmjudge(site, "challenge", "add", str(directory))
    assert added.stdout == ("registered contest: phases sanity (3 training and 2 test records), "
                            "validation (3 training and 4 test records), test (3 training and 8 test records), "
                            "scorer accuracy, 2 images\n")
    assert f"image {numpy.key} is up to date" in added.stderr and f"image {wfdb.key} is up to date" in added.stderr
    [row] = Queue(site.layout.queue_db).challenges()
    assert (row["image_key"], row["image_sha256"]) == (numpy.key, images_sha256([numpy, wfdb]))
    assert images_sha256([numpy]) == manifest_sha256(numpy)  # one image: recorded as before phases had their own
    assert vmjudge(site, "image", "build", str(directory)).stdout == f"{numpy.directory}\n{wfdb.directory}\n"
    assert vmjudge(site, "image", "build", str(directory), "--phase", "test").stdout == f"{wfdb.directory}\n"
    # The challenge's own [image] (no phase runs in it) is neither built nor asked for.
    assert not (site.layout.images / image_key(site, ImageRecipe())).exists()
    # Moving an image to another host: the phase's, named.
    assert vmjudge(site, "image", "export", str(directory), "-o", str(tmp_path / "i.tar"), ok=False).stderr == (
        "vmjudge: phases sanity, validation, test have a training set or an image of their own, so the image of "
        "contest differs by phase: name the phase with --phase (sanity, validation, test).\n")
    exported = vmjudge(site, "image", "export", str(directory), "-o", str(tmp_path / "i.tar"), "--phase", "test")
    assert exported.stdout.startswith(f"image {wfdb.key} exported to ")


def test_a_host_lacking_one_phases_image_takes_none_of_the_contests_stages(tmp_path, pg_url):
    directory = contest(tmp_path / "c")
    first, second = home(tmp_path / "judge1"), home(tmp_path / "judge2")
    images = [fake_image(first, directory, recipe=NUMPY), fake_image(first, directory, recipe=WFDB)]
    a, b = Queue(pg_url, host="judge1"), Queue(pg_url, host="judge2")
    assert register(first, a, load_challenge(directory), images, replace=False) == "registered contest"
    copy = tmp_path / "copy" / "contest"
    shutil.copytree(directory, copy)
    b.add_copy("contest", copy)
    shutil.copytree(images[0].directory, second.layout.images / images[0].key)  # the sanity phase's image only
    [row] = b.challenges()
    assert mismatch(second, row) == ("challenge contest: the guest image for this challenge is not built: run "
                                     "`vmjudge image build CHALLENGE_DIR`.")
    assert Environment(second, b).allowed() == ()
    other = fake_image(second, copy, root=b"hsqs another build", recipe=WFDB)  # the test phase's, built again here
    here = images_sha256([images[0], other])
    assert mismatch(second, row) == (
        f"challenge contest: this host's copy at {copy} is not the one registered (its phases' 2 images differ "
        f"({here[:12]} here, {row['image_sha256'][:12]} registered: copy it with `vmjudge image export` and "
        "`vmjudge image import`)): copy it again from the host that registered it")
    shutil.rmtree(other.directory)
    shutil.copytree(images[1].directory, second.layout.images / images[1].key)
    assert mismatch(second, row) is None and Environment(second, b).allowed() == ("contest",)


def test_the_stages_of_a_phases_entry_run_on_its_training_set(tmp_path):
    directory = contest(tmp_path)
    ch = load_challenge(directory)
    own = directory / "phases" / "sanity" / "training"
    for phase in ("sanity", "validation"):  # validation carries from sanity: its entries hold answers for f1-f3
        view = ch.in_phase(phase)
        job = record_job(SimpleNamespace(challenge=view), "training", view.training, collect_each=True)
        assert [c.name for c in job.commands] == ["next.sh f1", "next.sh f2", "next.sh f3"]
        assert job.media["training/RECORDS"] == b"f1\nf2\nf3\n"
        assert {k: v for k, v in job.media.items() if k != "training/RECORDS"} == {
            f"training/{r}.txt": own / f"{r}.txt" for r in OWN}
    # Prep bounds the submitted answers by the phase's training set (64 KiB and 256 bytes a record).
    def files(answers: int) -> Listed:
        return Listed.of([("setup.sh", False, 1), ("next.sh", False, 1), ("answers.txt", False, answers)],
                         lambda rel: b"#!/bin/sh\n")

    with pytest.raises(EntryError, match="answers for the 3 training records can need") as caught:
        check_components(ch.in_phase("sanity"), files(65536 + 256 * 3 + 1), "tar.gz")
    assert caught.value.reason == "answers-too-large"
    with pytest.raises(EntryError, match="can need"):
        check_components(ch, files(65536 + 256 * 3 + 1), "tar.gz")
    check_components(ch.in_phase("sanity"), files(65536 + 256 * 3), "tar.gz")


def lay_out(files: dict, where) -> None:
    """The replica ISO's files as the booted replica sees them under /media/replica."""
    for name, held in files.items():
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(held, bytes):
            path.write_bytes(held)
        else:
            path.symlink_to(held)


def test_a_phases_replica_carries_its_training_set_and_is_checked_in_it(tmp_path):
    directory = contest(tmp_path)
    site = home(tmp_path / "judge")
    image = fake_image(site, directory, recipe=NUMPY)
    ch = load_challenge(directory)
    refused = vmjudge(site, "replica", "build", str(directory), "-o", str(tmp_path / "r.iso"), ok=False)
    assert refused.stderr == ("vmjudge: phases sanity, validation, test have a training set or an image of their "
                              "own, so the replica of contest differs by phase: name the phase with --phase "
                              "(sanity, validation, test).\n")
    assert not (tmp_path / "r.iso").exists()
    files = replica_files(ch.shared_view("validation", "the replica"), image)
    challenge = {name.removeprefix("vmjudge/challenge/") for name in files if name.startswith("vmjudge/challenge/")}
    assert challenge == {"challenge.toml", "phases/sanity/training/RECORDS", "phases/sanity/training/REFERENCE.csv",
                         "phases/sanity/training/f1.txt", "phases/sanity/training/f2.txt",
                         "phases/sanity/training/f3.txt"}  # neither training/ nor any test set or reference
    meta = json.loads(files["vmjudge/replica.json"])
    assert (meta["phase"], meta["training_records"], meta["image"]) == ("validation", 3, image.key)
    replica = tmp_path / "replica"
    lay_out({k.removeprefix("vmjudge/"): v for k, v in files.items() if k.startswith("vmjudge/")}, replica)
    # What `vmjudge-replica check` judges in: the phase replica.json names, read from the replica's copy.
    seen = load_challenge(replica / "challenge").in_phase(replica_phase(replica))
    assert (seen.training, seen.image) == (("f1", "f2", "f3"), NUMPY)
    assert seen.record_files("training", "f2") == [replica / "challenge" / "phases" / "sanity" / "training" / "f2.txt"]
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "answers.txt").write_text("f1,7\nf2,8\nf3,9\n")
    assert training_scores(seen, entry)["score"] == pytest.approx(2 / 3)  # against the phase's REFERENCE.csv
    # The command writes that ISO (a stand-in image's files, so no VM is needed to look into it).
    iso = tmp_path / "validation.iso"
    built = vmjudge(site, "replica", "build", str(directory), "--phase", "validation", "-o", str(iso),
                    env={"VMJUDGE_URI": NO_VM_ENV["VMJUDGE_URI"]})  # the host's PATH: ISOLINUX and GRUB's tools
    assert built.stdout == f"{iso} {iso.stat().st_size}\n"
    held = iso_files(iso)
    assert {n.removeprefix("/vmjudge/challenge/") for n in held if n.startswith("/vmjudge/challenge/")} == challenge
    assert held["/vmjudge/challenge/phases/sanity/training/f2.txt"] == b"8\n"
    assert json.loads(held["/vmjudge/replica.json"])["phase"] == "validation"
    # A contest whose phases share everything keeps one replica, with no phase named.
    plain = load_challenge(contest_dir(tmp_path / "plain"))
    files = replica_files(plain.shared_view(None, "the replica"), fake_image(site, plain.directory))
    assert "phase" not in json.loads(files["vmjudge/replica.json"])
    assert "vmjudge/challenge/training/RECORDS" in files
