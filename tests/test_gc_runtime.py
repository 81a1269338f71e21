"""Grand Challenge's runtime (#55) judged end to end in real VMs: a challenge with sockets, images
written here without Docker (a busybox root, tests/test_container_pipeline.py's), one daemon run.

Each image's command is a shell script that checks, from inside its container, what Grand
Challenge promises a job (HOME from the image's passwd, the user's groups, /input/inputs.json and
every input at its relative path, /input read-only, an empty /output, no VMJUDGE_* variable,
/dev/shm half the memory, /tmp the disk of the size asked and empty at each case's start) and
exits with a code of its own when one fails, then writes its outputs by socket. The good image's
masks score what the host computes; two images in one socket, no output, a crash, each gets its
verdict naming the case and the socket, never an infrastructure failure; what the image writes to
stderr comes back apart, as its warnings.

The same daemon run judges examples/hecktor2025's Task 1 in its sanity phase with images built from Grand
Challenge's own algorithm template as the forge renders it (tests/gc_template.py: its Dockerfile's steps,
`pip install --user` included, without Docker; stand-ins for torch, numpy and SimpleITK, which these
machines do not have), saved under the name its do_save.sh gives: the good one scores exactly the Dice the
host computes from the same masks, and each bad one gets its verdict, never an infrastructure failure.

The sanity phase's replica ISO, booted once in plain qemu, checks two of those same archives with
`vmjudge-replica check`: the template's good image passes with the judge's own quiz paragraph (each training
case's outputs), and the one leaving two images fails as the judge failed it, naming case and socket, its
report the judge's word for word but for the figures."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.queue.results import ExamResults
from vmjudge.replica.build import training_files
from vmjudge.scorers.builtin import dice
from vmjudge.scorers.mha import read_mha, write_mha
from vmjudge.stages.sockets import inputs_json
from vmjudge.vm import domain
from vmjudge.web.usage_chart import usage_charts

from . import gc_template
from . import oci_images as oci
from .host_lock import linked_home
from .oci_images import Image, Layer
from .published import wait_until_published
from .replica_console import Console, json_line
from .test_container_pipeline import Judged, busybox_members
from .test_pipeline import vmjudge
from .test_replica import BOOT_TIMEOUT, CHECK_TIMEOUT, daemon_stage_messages, guide_qemu_command, without_figures

CHALLENGE = """name = "gcrt"
[entry]
kind = "container"
max_size = 67108864
max_unpacked = 67108864
max_members = 10000
[container]
tmp = 64
[vm]
vcpus = 1
memory = 384
home = 64
instance = "test.nano"
[limits]
per_record = 10
quiz_total = 60
exam_total = 60
[[input]]
slug = "ct-image"
kind = "image"
relative_path = "images/ct"
[[input]]
slug = "electronic-health-record"
kind = "anything"
relative_path = "ehr.json"
[[output]]
slug = "tumor-lymph-node-segmentation"
kind = "segmentation"
like = "ct-image"
[[output]]
slug = "recurrence-free-survival"
kind = "float"
relative_path = "rfs.json"
[score]
scorer = "dice"
socket = "tumor-lymph-node-segmentation"
"""
CASES = {"training": ("c1", "c2"), "test": ("t1", "t2", "t3")}
SEG = "/output/images/tumor-lymph-node-segmentation"
# What every image checks before it writes anything: exit 11-17 names the promise broken.
CHECKS = ('test "$HOME" = /home/user || exit 11; test -d "$HOME" || exit 11; '
          'id -G | grep -qw 1234 || exit 12; '
          'grep -q \'"relative_path": "images/ct"\' /input/inputs.json || exit 13; '
          'test -f /input/images/ct/*.mha -a -f /input/ehr.json || exit 14; '
          'touch /input/x 2>/dev/null && exit 15; '
          'test -z "$(ls -A /output)" || exit 16; '
          'env | grep -q VMJUDGE && exit 17; '
          # /dev/shm: half the memory of a VM of 384 MiB, as Grand Challenge gives half of an instance's
          's=$(df -k /dev/shm | tail -1 | tr -s " " | cut -d" " -f2); '
          'test "$s" -gt 150000 -a "$s" -lt 200000 || exit 18; '
          # /tmp: [container] tmp's 64 MiB disk, empty at each case's start (what the last one left is gone)
          's=$(df -k /tmp | tail -1 | tr -s " " | cut -d" " -f2); test "$s" -gt 60000 -a "$s" -le 65536 || exit 19; '
          'test -z "$(ls -A /tmp)" || exit 20; echo x > /tmp/left-by-a-case || exit 21; ')
GOOD = (CHECKS + f'mkdir -p {SEG} && cp /input/images/ct/*.mha {SEG}/output.mha && echo -0.5 > /output/rfs.json; '
        'echo "warning: the model is a copy" >&2; echo done')
SCRIPTS = {
    "good": GOOD,
    "two-images": GOOD + f"; cp {SEG}/output.mha {SEG}/second.mha",
    "no-output": CHECKS + "echo nothing written",
    "crash": CHECKS + "echo 'Traceback: boom' >&2; exit 3",
}
EXPECT = {"good": ("scored", None, None), "two-images": ("failed", "quiz", "quiz-output"),
          "no-output": ("failed", "quiz", "quiz-output"), "crash": ("failed", "quiz", "quiz-error"),
          # Grand Challenge's template, each sample a participant's edit of its model lines
          "gc-good": ("scored", None, None), "gc-stderr": ("scored", None, None),
          "gc-crash": ("failed", "quiz", "quiz-error"), "gc-no-output": ("failed", "quiz", "quiz-output"),
          "gc-two-images": ("failed", "quiz", "quiz-output"), "gc-slow": ("failed", "quiz", "quiz-timeout"),
          "gc-hungry": ("failed", "quiz", "quiz-error")}
HECKTOR = Path(__file__).resolve().parent.parent / "examples" / "hecktor2025" / "task1"
SLOWEST = ("gc-slow", "gc-hungry")  # first, so that they run beside the others


def volume(record: str) -> bytes:
    """A case's CT: 4x3x2 voxels, some of them not zero (the good image's 'mask' is its copy)."""
    data = bytes((i + sum(map(ord, record))) % 3 for i in range(24))
    mha = write_mha((4, 3, 2), "MET_UCHAR", data, (0.5, 0.5, 2.0))
    return mha.replace(b"ElementSpacing", b"Offset = -10 -20 5\nElementSpacing")


def challenge(path: Path) -> Path:
    (path / "reference").mkdir(parents=True)
    (path / "challenge.toml").write_text(CHALLENGE)
    for subset, records in CASES.items():
        (path / subset).mkdir()
        (path / subset / "RECORDS").write_text("".join(f"{r}\n" for r in records))
        for r in records:
            (path / subset / r / "images" / "ct").mkdir(parents=True)
            (path / subset / r / "images" / "ct" / f"{r}-0000.mha").write_bytes(volume(r))
            (path / subset / r / "ehr.json").write_text(json.dumps({"Age": 60 + len(r), "M-stage": "M0"}))
    for r in CASES["test"]:  # the reference: the CT's own foreground but for t3's, which is empty
        mask = volume(r) if r != "t3" else write_mha((4, 3, 2), "MET_UCHAR", bytes(24), (0.5, 0.5, 2.0))
        (path / "reference" / f"REFERENCE-{r}.mha").write_bytes(mask)
    return path


def account() -> list[oci.Member]:
    """The image's user as `useradd -m` makes it: a passwd entry with its home, and a group it is a member of."""
    return [oci.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nuser:x:999:999::/home/user:/bin/sh\n"),
            oci.file("etc/group", b"root:x:0:\nuser:x:999:\nextra:x:1234:user\n"),
            oci.directory("home"), oci.directory("home/user", mode=0o755, uid=999, gid=999)]


@pytest.fixture(scope="module")
def judged(site, image, conn):
    home = linked_home(site.home, "gc-runtime-")
    work = home / "work"
    work.mkdir()
    vmjudge(home, "challenge", "add", str(challenge(work / "gcrt")))
    base = Layer.of([m for m in busybox_members() if m.info.name not in ("etc/passwd", "etc/group")] + account(),
                    compression=None)
    vmjudge(home, "challenge", "add", str(HECKTOR))
    ids = {}
    for name, path in gc_template.sample_images(image.root, work / "template").items():
        ids[f"gc-{name}"] = (path, "hecktor2025-task1")
    for name, script in SCRIPTS.items():
        img = Image([base], cmd=["/bin/sh", "-c", script], env=["PATH=/bin"], user="user")
        ids[name] = (oci.docker_save(work / f"example-algorithm-{name}_2026-12-04_12-00-00.tar.gz", img,
                                     compress=True), "gcrt")
    for name in sorted(ids, key=lambda n: SLOWEST.index(n) if n in SLOWEST else len(SLOWEST)):
        archive, where = ids[name]
        phase = ("--phase", "sanity") if where != "gcrt" else ()
        ids[name] = int(vmjudge(home, "submit", where, str(archive), "--owner", name, *phase).stdout)
    vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    wait_until_published(home)
    yield Judged(home, ids, {})
    assert domain.leftover_domains(conn) == []
    shutil.rmtree(home)


@pytest.mark.parametrize("name", list(EXPECT))
def test_each_entry_gets_its_verdict_never_an_infrastructure_failure(judged, name):
    doc = judged.show(name)
    assert (doc["state"], doc["outcome"], doc["failed_stage"], doc["reason"]) == ("done", *EXPECT[name]), doc["report"]
    attempts = judged.show(name, organiser=True)["organiser"]["attempts"]
    assert [a for a in attempts if a["status"] == "infra"] == [], attempts


def test_the_good_image_scores_the_dice_the_host_computes(judged):
    doc = judged.show("good")
    # t1 and t2: the mask is the reference itself; t3: an empty reference and a mask that is not empty.
    assert doc["scores"]["score"] == pytest.approx(2 / 3) and doc["scores"]["records"] == 3.0, doc["report"]
    assert doc["exam"] == {"records": 3, "completed": 3, "failed": 0, "timed_out": 0}


def test_the_quiz_shows_each_training_cases_outputs_and_warnings(judged):
    report = judged.show("good")["report"]
    assert "All 2 training cases left valid outputs" in report
    assert "c1: tumor-lymph-node-segmentation: an image of" in report and "recurrence-free-survival: -0.5" in report
    assert "warnings (stderr, 29 bytes)" in report and "warning: the model is a copy" in report
    assert "--- output (stdout, 5 bytes) ---\ndone" in report


def test_the_exam_counts_each_cases_warnings_for_the_organiser_alone(judged):
    exam = [a for a in judged.show("good", organiser=True)["organiser"]["attempts"] if a["stage"] == "exam"]
    assert exam[-1]["manifest"]["stderr_bytes"] == dict.fromkeys(CASES["test"], 29), exam
    assert "stderr_bytes" not in json.dumps(judged.show("good"))


def test_each_training_case_is_sampled_over_time_and_drawn_and_no_test_case(judged):
    """Runtime metrics per case: the guest samples each case's cgroup while it runs; participants get a
    training case's series, which the report page draws, and nothing per test case."""
    for name, cases in (("good", CASES["training"]), ("gc-good", load_challenge(HECKTOR).in_phase("sanity").training)):
        doc = judged.show(name)
        quiz = doc["figures"]["quiz"]
        assert [r["record"] for r in quiz["records"]] == list(cases), name
        for r in quiz["records"]:
            samples = r["samples"]
            times = [t for t, _, _ in samples]
            assert 2 <= len(samples) <= 120 and times == sorted(set(times)) and times[-1] <= r["seconds"], r
            assert samples[-1][1] <= r["cpu_seconds"] and 0 < max(m for _, _, m in samples) <= r["peak_memory"], r
        charts, sampled = usage_charts(quiz)
        assert sampled == len(cases) and [c.record for c in charts] == list(cases), name
        assert all(p.limit_y is not None for c in charts for p in c.panels)  # the memory cap and the vCPUs
        assert "samples" not in json.dumps(doc["figures"]["exam"]), name
        assert f"{len(cases)} of {len(cases)} training cases sampled over time" in doc["report"], name
    assert "the VM mirrors test.nano" in judged.show("good")["report"]


def test_a_bad_output_is_named_by_case_and_socket(judged):
    two = judged.show("two-images")["report"]
    assert f"case c1, output socket tumor-lymph-node-segmentation: {SEG} holds 2 files (output.mha, " \
           "second.mha), not exactly one image" in two
    none = judged.show("no-output")["report"]
    assert "case c1, output socket tumor-lymph-node-segmentation:" in none and "no file /output/rfs.json" in none
    crash = judged.show("crash")["report"]
    assert "the image on case c1: failed (exit status 3)" in crash and "Traceback: boom" in crash
    assert "warnings (stderr" in crash


def host_dice(phase: str) -> dict[str, float | None]:
    """The good sample's masks computed on the host (the PET over 40 % of its maximum), scored by the
    built-in dice against the phase's reference, as stage 4 scores what the VM sent back."""
    ch = load_challenge(HECKTOR).in_phase(phase)
    outputs = {}
    for record in ch.test:
        pet_dir = ch.set_dir("test") / record / "images" / "pet"
        pet = read_mha(next(pet_dir.glob("*.mha")).read_bytes())
        values = pet.values()
        level = 0.4 * max(values)
        mask = bytes(1 if v > level else 0 for v in values)
        outputs[record] = {"tumor-lymph-node-segmentation": write_mha(pet.shape, "MET_UCHAR", mask)}
    return dice.score(ExamResults(records=ch.test, outputs=outputs), ch.reference_dir, ch.score_options)


def test_grand_challenges_template_scores_the_dice_the_host_computes(judged):
    expected = host_dice("sanity")
    for name in ("gc-good", "gc-stderr"):
        doc = judged.show(name)
        assert doc["scores"] == pytest.approx(expected), (name, doc["report"])
        assert doc["exam"] == {"records": 3, "completed": 3, "failed": 0, "timed_out": 0}, name
    report = judged.show("gc-stderr")["report"]
    assert "warning: no GPU, the model runs on the CPU" in report and "warnings (stderr" in report
    assert "warnings (stderr" not in judged.show("gc-good")["report"]


def test_grand_challenges_template_bad_samples_say_why(judged):
    seg = "/output/images/tumor-lymph-node-segmentation"
    first = load_challenge(HECKTOR).training[0]
    assert "RuntimeError: no checkpoint" in judged.show("gc-crash")["report"]
    assert f"case {first}, output socket tumor-lymph-node-segmentation: {seg} is not a directory" in \
        judged.show("gc-no-output")["report"]
    assert f"{seg} holds 2 files (output.mha, pet.mha), not exactly one image" in judged.show("gc-two-images")["report"]
    assert "timed out after" in judged.show("gc-slow")["report"]
    assert "killed, out of memory (exit status 137" in judged.show("gc-hungry")["report"]


def test_the_replica_lays_out_each_training_case_as_the_judge_does(tmp_path):
    """The replica's copy of the training set (replica/build.py training_files), read as `vmjudge-replica check`
    reads it, gives each case the same files at the same paths of its /input, and the same inputs.json, as the
    judge's: a case of a challenge with sockets is a directory, whose files keep their paths on the ISO."""
    ch = load_challenge(HECKTOR).shared_view("sanity", "the replica")
    copy = tmp_path / "challenge"
    for name, path in {"challenge.toml": HECKTOR / "challenge.toml", **training_files(ch)}.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy / name)
    seen = load_challenge(copy).in_phase("sanity")

    def case(c, record: str) -> dict[str, bytes]:
        top = c.set_dir("training") / record
        return {f.relative_to(top).as_posix(): f.read_bytes() for f in c.record_files("training", record)}

    assert seen.training == ch.training and len(ch.training) == 3
    for record in ch.training:
        assert case(seen, record) == case(ch, record) and len(case(ch, record)) == 3, record
        assert inputs_json(seen, "training", record) == inputs_json(ch, "training", record)


REPLICA_SAMPLES = ("good", "two-images")  # of the template's samples, checked in one boot of the replica


def quiz_paragraph(report: str) -> str:
    """A report's "Stage 2 (quiz)" paragraph, without the figures of what its run used."""
    text = without_figures(report)
    start = text.index("\nStage 2 (quiz): ") + 1
    end = text.find("\n\n", start)
    return text[start:end if end >= 0 else len(text)]


def test_the_replica_checks_the_templates_images_as_the_judge_did(judged):
    """The sanity phase's replica, built by the CLI and booted with the participants' guide's qemu command, the
    archives the judge judged on its FAT drive: `vmjudge-replica check` makes each image's root with the judge's
    tools and runs it case by case with the judge's agent, each training case's directory its /input. The good
    image passes with the judge's own quiz paragraph, each case's outputs; the one leaving two images fails as
    the judge failed it, naming case and socket, its report the judge's word for word but for the figures."""
    home = judged.home
    iso = home / "hecktor2025-task1-sanity.iso"
    built = vmjudge(home, "replica", "build", "hecktor2025-task1", "--phase", "sanity", "-o", str(iso))
    assert "[3/3] done" in built.stderr and "(3 training records" in built.stderr
    entries = home / "replica-entries"
    entries.mkdir()
    names = {}
    for sample in REPLICA_SAMPLES:  # the very archives submitted, under the names do_save.sh gave them
        shown = judged.show(f"gc-{sample}")
        names[sample] = shown["archive_name"]
        shutil.copyfile(home / "work" / "template" / names[sample], entries / names[sample])
        assert hashlib.sha256((entries / names[sample]).read_bytes()).hexdigest() == shown["archive_sha256"]
    argv = [str(iso) if a == "replica.iso" else a.replace("fat:ro:entries", f"fat:ro:{entries}")
            for a in guide_qemu_command()]
    first = load_challenge(HECKTOR).training[0]
    seg = "/output/images/tumor-lymph-node-segmentation"
    started = time.monotonic()
    console = Console(argv + ["-accel", "tcg", "-display", "none"])
    try:
        console.expect(r"replica# ", BOOT_TIMEOUT)
        console.send("vmjudge-replica media; echo @@MEDIA@@ $?")
        console.expect(rf"entry\? /media/vda1/{names['good']}", 120)
        assert console.expect(r"@@MEDIA@@ (\d+)", 120).group(1) == "0"
        for sample in REPLICA_SAMPLES:
            began = time.monotonic()
            output, status = console.run(f"vmjudge-replica check --json /media/vda1/{names[sample]}", CHECK_TIMEOUT)
            print(f"replica check of {sample}: {time.monotonic() - began:.1f} s")
            replica = json_line(output)
            judge = judged.show(f"gc-{sample}")
            messages = daemon_stage_messages(home, judged.ids[f"gc-{sample}"])
            assert (replica["challenge"], replica["cpu_warning"]) == ("hecktor2025-task1", None)
            assert replica["stages"]["prep"] == messages["prep"], sample
            if sample == "good":
                assert (replica["outcome"], status) == ("passed", 0), replica["report"]
                assert replica["stages"]["quiz"] == messages["quiz"]
                quiz = quiz_paragraph(replica["report"])
                assert quiz == quiz_paragraph(judge["report"])
                assert quiz.startswith("Stage 2 (quiz): All 3 training cases left valid outputs:\n"), quiz
                for record in load_challenge(HECKTOR).training:
                    assert f"\n{record}: tumor-lymph-node-segmentation: an image of " in quiz, record
                assert replica["training_scores"] is None  # a challenge with sockets: no submitted answers to score
                assert "would now go on to stage 3" in replica["report"]
                continue
            assert (replica["outcome"], replica["failed_stage"], replica["reason"], status) == \
                (judge["outcome"], judge["failed_stage"], judge["reason"], 1) == ("failed", "quiz", "quiz-output", 1)
            assert replica["stages"] == messages
            assert without_figures(replica["report"]).split("\n", 1)[1] == \
                without_figures(judge["report"]).split("\n", 1)[1]
            assert f"case {first}, output socket tumor-lymph-node-segmentation: {seg} holds 2 files (output.mha, " \
                "pet.mha), not exactly one image" in replica["report"]
    finally:
        console.close()
    print(f"replica of hecktor2025-task1 (sanity): booted and checked {len(REPLICA_SAMPLES)} images in "
          f"{time.monotonic() - started:.1f} s")
