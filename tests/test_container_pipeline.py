"""Container entries (#39) judged end to end: `vmjudge submit` of `docker save` archives written
here without Docker (tests/oci_images.py, a busybox-static tree as in test_container_root.py),
one `vmjudge daemon --until-idle` with 2 slots over two tiny challenges (each record a word, the
result the word in capitals; one runs per case, the other once for the whole set), real VMs.
One module fixture judges every entry in one daemon run; the tests then read the verdicts.

Each entry shows one promise: a good image is scored as the host computes it; a command that
fails, overruns its time or its memory fails the quiz with its reason (the entry's, never an
infrastructure retry); what a command writes outside its output has no effect on the next
record or on the submitted results; a wrong submitted result is a mismatch showing both sides; a
link where a submitted result should be is refused at prep; the dry-run label ends at the quiz;
an image whose sh and python3 print "hacked" is judged as usual; and the same image twice (or
the same layers under another config) makes its root once.

The same run judges examples/segment2025's sample images (tests/segment_images.py: Debian's
python3 from the judge's own root, no Docker): the good one scores the Dice the host computes from
the same masks; a crash, a mask left outside /output, a download, a timeout and a model larger
than memory each get their verdict, never an infrastructure failure; the hostile image's layers
are neutralised (it checks so from inside), and those admission refuses are refused by submit,
each saying why, with nothing queued."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.images import build
from vmjudge.replica.local import ENTRY_ROOT as ENTRY_ROOT_REPLICA
from vmjudge.replica.tools import tool_files
from vmjudge.vm import domain

from . import oci_images as oci
from .cli import run_cli
from .host_lock import linked_home
from .oci_images import Image, Layer
from .published import wait_until_published
from .replica_console import Console, json_line
from .segment_images import EXAMPLE as SEGMENT
from .segment_images import REFUSED, refused_images, sample_images
from .test_container_root import HOSTILE, static_busybox
from .test_pipeline import vmjudge
from .test_replica import (
    BOOT_TIMEOUT,
    CHECK_TIMEOUT,
    daemon_stage_messages,
    guide_qemu_command,
    iso_files,
    sha,
    without_figures,
)
from .test_segment2025 import host_dice, run_good_on_host

WORDS = {"training": {"r1": "apple", "r2": "pear"}, "test": {"t1": "plum", "t2": "fig", "t3": "kiwi"}}
REFERENCE = {"t1": "PLUM", "t2": "FIG", "t3": "LIME"}  # t3's label is not kiwi's: a good entry scores 2/3
PER_CASE = 'tr a-z A-Z < "/input/$VMJUDGE_RECORD.txt" > "/output/$VMJUDGE_RECORD.txt"'
WHOLE_SET = 'for r in $(cat "$VMJUDGE_RECORDS"); do tr a-z A-Z < "/input/$r.txt" > "/output/$r.txt"; done'
# Writes everywhere it can besides its output, and fails if anything an earlier record wrote is
# still there; its image lets its user write /submitted and the results there.
OUTSIDE = ("for f in /etc/evil /tmp/evil /submitted/evil /evil; do "
           '[ -e $f ] && { echo "$f persisted"; exit 9; }; done; '
           'echo x > /etc/evil; echo x > /tmp/evil; echo x > /submitted/evil; echo x > /evil; '
           'echo WRONG > "/submitted/$VMJUDGE_RECORD.txt"; ' + PER_CASE)
EAT = ("m=$(grep MemTotal /proc/meminfo | tr -s ' ' | cut -d' ' -f2); "
       "exec dd if=/dev/zero of=/dev/null bs=$((m - 16384))k count=1")
PER_RECORD = 8

CHALLENGE = """name = "{name}"
[entry]
kind = "container"
max_size = 67108864
max_unpacked = 67108864
max_members = 10000
[container]
run = "{run}"
[vm]
vcpus = 1
memory = 384
home = 64
[limits]
per_record = {per_record}
quiz_total = 60
exam_total = 60
output = 65536
[results]
style = "files"
pattern = "{{record}}.txt"
submitted = "/submitted/{{record}}.txt"
[score]
scorer = "tests.exact_match_scorer:score"
"""

# entry -> (challenge, outcome, failed stage, reason)
EXPECT = {
    "good": ("ctr", "scored", None, None),
    "good-again": ("ctr", "scored", None, None),
    "crash": ("ctr", "failed", "quiz", "quiz-error"),
    "outside": ("ctr", "scored", None, None),
    "slow": ("ctr", "failed", "quiz", "quiz-timeout"),
    "hungry": ("ctr", "failed", "quiz", "quiz-error"),
    "dryrun": ("ctr", "dry-run", None, None),
    "hostile": ("ctr", "scored", None, None),
    "mismatch": ("ctr", "failed", "quiz", "quiz-mismatch"),
    "link": ("ctr", "failed", "prep", "bad-image"),
    "whole-set": ("ctr-set", "scored", None, None),
    "seg-good": ("segment2025", "scored", None, None),
    "seg-crash": ("segment2025", "failed", "quiz", "quiz-error"),
    "seg-outside": ("segment2025", "failed", "quiz", "quiz-mismatch"),
    "seg-network": ("segment2025", "failed", "quiz", "quiz-error"),
    "seg-slow": ("segment2025", "failed", "quiz", "quiz-timeout"),
    "seg-hungry": ("segment2025", "failed", "quiz", "quiz-error"),
    "seg-hostile": ("segment2025", "dry-run", None, None),
}
# The slowest first (the quizzes that wait out their time), so they run beside the others.
SLOWEST = ("seg-slow", "slow")


def challenge(path: Path, name: str, run: str) -> Path:
    (path / "reference").mkdir(parents=True)
    (path / "challenge.toml").write_text(CHALLENGE.format(name=name, run=run, per_record=PER_RECORD))
    for subset, words in WORDS.items():
        (path / subset).mkdir()
        (path / subset / "RECORDS").write_text("".join(f"{r}\n" for r in words))
        for record, word in words.items():
            (path / subset / f"{record}.txt").write_text(word + "\n")
    (path / "reference" / "REFERENCE.csv").write_text("".join(f"{r},{label}\n" for r, label in REFERENCE.items()))
    return path


def busybox_members(sh: bytes | None = None) -> list[oci.Member]:
    """A root of busybox and its applets, accounts, a /tmp; with `sh`, /bin/sh and
    /usr/bin/python3 are that script rather than busybox."""
    busybox = static_busybox()
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    members = [oci.directory("bin"), oci.file("bin/busybox", busybox.read_bytes(), mode=0o755)]
    members += [oci.symlink(f"bin/{a}", "busybox") for a in applets if a != "busybox" and not (sh and a == "sh")]
    if sh:
        members += [oci.file("bin/sh", sh, mode=0o755), oci.directory("usr"), oci.directory("usr/bin"),
                    oci.file("usr/bin/python3", sh, mode=0o755)]
    members += [oci.directory("etc"), oci.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"),
                oci.file("etc/group", b"root:x:0:\n"), oci.directory("tmp", mode=0o1777)]
    return members


def submitted(results: dict[str, bytes], writable: bool = False) -> list[oci.Member]:
    return [oci.directory("submitted", mode=0o777 if writable else 0o755)] + \
        [oci.file(f"submitted/{r}.txt", data, mode=0o666 if writable else 0o644) for r, data in results.items()]


RIGHT = {r: w.upper().encode() + b"\n" for r, w in WORDS["training"].items()}


def images(busybox: Layer, hostile: Layer) -> dict[str, Image]:
    def of(script: str, *layers: Layer, argv: tuple[str, ...] = ("/bin/sh", "-c"), **kw) -> Image:
        return Image(list(layers), cmd=[*argv, script], env=["PATH=/bin"], **kw)

    right = Layer.of(submitted(RIGHT), compression=None)
    return {
        "good": of(PER_CASE, busybox, right),
        "crash": of("echo boom >&2; exit 3", busybox, right),
        "outside": of(OUTSIDE, busybox, Layer.of(submitted(RIGHT, writable=True), compression=None)),
        "slow": of("sleep 30", busybox, right),
        "hungry": of(EAT, busybox, right),
        "dryrun": of(PER_CASE, busybox, right, labels={"org.vmjudge.dryrun": "1"}),
        # Its own sh would print "hacked": the command names busybox's, and nothing else of the
        # image runs as the judge's.
        "hostile": of(PER_CASE, hostile, right, argv=("/bin/busybox", "sh", "-c")),
        "mismatch": of(PER_CASE, busybox, Layer.of(submitted({**RIGHT, "r1": b"APPLES\n"}), compression=None)),
        "link": of(PER_CASE, busybox, Layer.of([oci.directory("submitted"), oci.symlink("submitted/r1.txt",
                                                                                       "/etc/passwd")],
                                                compression=None)),
        "whole-set": of(WHOLE_SET, busybox, right),
    }


class Judged:
    def __init__(self, home: Path, ids: dict[str, int], refused: dict[str, tuple[int, str, int]]):
        self.home, self.ids, self.refused = home, ids, refused
        self._shown: dict[tuple[int, bool], dict] = {}

    def show(self, name: str, organiser: bool = False) -> dict:
        key = (self.ids[name], organiser)
        if key not in self._shown:
            args = ["show", str(self.ids[name]), "--json"] + (["--organiser"] if organiser else [])
            self._shown[key] = json.loads(vmjudge(self.home, *args).stdout)
        return self._shown[key]

    def prep_manifest(self, name: str) -> dict:
        runs = [a for a in self.show(name, organiser=True)["organiser"]["attempts"] if a["stage"] == "prep"]
        assert len(runs) == 1, runs
        return runs[0]["manifest"]


@pytest.fixture(scope="module")
def judged(site, image, conn):
    home = linked_home(site.home, "container-pipeline-")
    work = home / "work"
    work.mkdir()
    vmjudge(home, "challenge", "add", str(challenge(work / "ctr", "ctr", "per_case")))
    vmjudge(home, "challenge", "add", str(challenge(work / "ctr-set", "ctr-set", "whole_set")))
    vmjudge(home, "challenge", "add", str(SEGMENT))
    busybox = Layer.of(busybox_members(), compression=None)
    hostile = Layer.of(busybox_members(sh=HOSTILE.encode()), compression=None)
    built = images(busybox, hostile)
    archives = {name: oci.docker_save(work / f"{name}-image.tar", image) for name, image in built.items()}
    archives["good-again"] = archives["good"]
    archives.update({f"seg-{name}": path for name, path in sample_images(image.root, work / "segment").items()})
    ids = {}
    for name in sorted(archives, key=lambda n: SLOWEST.index(n) if n in SLOWEST else len(SLOWEST)):
        ids[name] = int(vmjudge(home, "submit", EXPECT[name][0], str(archives[name]), "--owner", name).stdout)
    refused = {name: submit_refused(home, path) for name, path in refused_images(work / "refused").items()}
    vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    wait_until_published(home)
    yield Judged(home, ids, refused)
    assert domain.leftover_domains(conn) == []
    shutil.rmtree(home)


def submit_refused(home: Path, archive: Path) -> tuple[int, str, int]:
    """`vmjudge submit` of an image admission must refuse: its status, its sentence, and how many
    entries the queue gained."""
    before = json.loads(vmjudge(home, "entries", "--json").stdout)["total"]
    proc = run_cli("submit", "segment2025", str(archive), "--owner", "mallory", home=home)
    after = json.loads(vmjudge(home, "entries", "--json").stdout)["total"]
    return proc.returncode, proc.stderr, after - before


@pytest.mark.parametrize("name", list(EXPECT))
def test_each_container_entry_gets_its_verdict(judged, name):
    doc = judged.show(name)
    _, outcome, stage, reason = EXPECT[name]
    assert (doc["state"], doc["outcome"], doc["failed_stage"], doc["reason"]) == ("done", outcome, stage, reason), \
        doc["report"]


def test_no_verdict_is_an_infrastructure_failure(judged):
    for name in EXPECT:
        attempts = judged.show(name, organiser=True)["organiser"]["attempts"]
        assert [a for a in attempts if a["status"] == "infra"] == [], (name, attempts)


def test_a_good_image_scores_what_the_host_computes(judged):
    answers = {r: w.upper() for r, w in WORDS["test"].items()}
    correct = sum(1 for r, label in REFERENCE.items() if answers[r] == label)
    expected = {"correct": float(correct), "records": 3.0, "score": pytest.approx(correct / 3)}
    for name in ("good", "good-again", "outside", "hostile", "whole-set"):
        doc = judged.show(name)
        assert doc["scores"] == expected, (name, doc["report"])
        assert doc["exam"] == {"records": 3, "completed": 3, "failed": 0, "timed_out": 0}, name
        assert "All 2 training records reproduced the submitted answers." in doc["report"]


def test_failures_say_why_with_the_training_records_output(judged):
    crash = judged.show("crash")["report"]
    assert "the image's command on r1: failed (exit status 3). Entry not scored." in crash and "boom" in crash
    assert f"the image's command on r1: timed out after {PER_RECORD} s" in judged.show("slow")["report"]
    mismatch = judged.show("mismatch")["report"]
    assert "the image's command on r1: output does not match submission" in mismatch
    assert "submitted /submitted/r1.txt: 7 bytes\n  produced r1.txt: 6 bytes" in mismatch
    assert "first difference at byte 5" in mismatch
    link = judged.show("link")["report"]
    assert "The image's /submitted/r1.txt is not a regular file" in link
    for name in ("crash", "slow", "mismatch", "hungry"):
        for record in WORDS["test"]:
            assert f"{record}.txt" not in judged.show(name)["report"]


def test_a_command_over_its_memory_is_killed_and_charged_to_the_entry(judged):
    doc = judged.show("hungry", organiser=True)
    quiz = [a for a in doc["organiser"]["attempts"] if a["stage"] == "quiz"]
    assert len(quiz) == 1 and quiz[0]["status"] == "failed", quiz
    row = quiz[0]["figures"]["commands"][0]
    assert row["name"] == "r1" and row["oom_kills"] >= 1, row


def test_writes_outside_the_output_leave_the_submitted_results_and_later_records_alone(judged):
    # Its command exits 9 on the second record if anything the first wrote had lasted; and it
    # overwrote /submitted in its run, which the host had read from the image at prep.
    entry = judged.home / "results" / str(judged.ids["outside"]) / "entry" / "submitted"
    assert {p.name: p.read_bytes() for p in entry.iterdir()} == {f"{r}.txt": d for r, d in RIGHT.items()}


def test_the_dry_run_label_ends_the_entry_at_the_quiz(judged):
    doc = judged.show("dryrun")
    assert "Dry run completed with no error. Remove the label org.vmjudge.dryrun" in doc["report"]
    assert doc["exam"] is None and doc["scores"] == {}


def test_an_images_own_sh_and_python3_never_run_for_the_judge(judged):
    results = judged.home / "results" / str(judged.ids["hostile"])
    for log in results.glob("*.log"):
        assert b"hacked" not in log.read_bytes(), log


def test_each_root_is_made_once_and_recorded_in_the_prep_manifest(judged):
    """good and good-again are the same archive; dryrun, crash, slow and hungry differ from it in
    their config alone, so their layers are the same: one root, made by the first prep to get
    there, found by the others."""
    same = ("good", "good-again", "dryrun", "crash", "slow", "hungry", "whole-set")
    roots = {name: judged.prep_manifest(name)["entry_root"] for name in same}
    assert len({r["digest"] for r in roots.values()}) == 1, roots
    assert sorted(r["reused"] for r in roots.values()) == [False] + [True] * (len(same) - 1), roots
    made = roots["good"]
    assert made["files"] == 5 and made["squashfs_bytes"] > 0 and made["config"]["cmd"][-1] == PER_CASE
    assert judged.prep_manifest("good")["entry_image"]["image_id"] == \
        judged.prep_manifest("good-again")["entry_image"]["image_id"]
    assert judged.prep_manifest("outside")["entry_root"]["digest"] != made["digest"]
    # Participants are not told whether a root was made or found: it would say that someone
    # else had submitted the same layers.
    said = {name: next(line for line in judged.show(name)["report"].splitlines() if line.startswith("Stage 1"))
            for name in ("good", "good-again")}
    assert said["good"] == said["good-again"] and "ready" in said["good"], said


def test_segment2025s_good_image_scores_the_dice_the_host_computes(judged, tmp_path):
    ch = load_challenge(SEGMENT)
    masks: dict[str, bytes | None] = {r: run_good_on_host("test", r, tmp_path) for r in ch.test}
    doc = judged.show("seg-good")
    assert doc["scores"]["score"] == host_dice(SEGMENT / "reference", masks), doc["report"]
    assert doc["exam"] == {"records": 3, "completed": 3, "failed": 0, "timed_out": 0}
    assert "All 2 training records reproduced the submitted answers." in doc["report"]


def test_segment2025s_bad_images_say_why(judged):
    network = judged.show("seg-network")["report"]
    assert "Network is unreachable" in network and "the image's command on case01: failed (exit status 2)" in network
    crash = judged.show("seg-crash")["report"]
    assert "FileNotFoundError" in crash and "/app/model/weights.pt" in crash
    outside = judged.show("seg-outside")["report"]  # its mask went to /tmp/output; its writes were refused
    assert "the image's command on case01: no output file case01.mha. Entry not scored." in outside
    for said in ("/input/case01.pt.mha: Read-only file system", "/app/good/inference.py: Permission denied",
                 "/submitted/case01.mha: Permission denied", "/etc/passwd: Permission denied"):
        assert f"could not write {said}" in outside, outside
    assert f"the image's command on case01: timed out after {load_challenge(SEGMENT).limits.per_record:g} s" in \
        judged.show("seg-slow")["report"]
    hungry = [a for a in judged.show("seg-hungry", organiser=True)["organiser"]["attempts"] if a["stage"] == "quiz"]
    assert hungry[0]["figures"]["commands"][0]["oom_kills"] >= 1, hungry


def test_segment2025s_hostile_layers_are_neutralised_or_refused(judged):
    doc = judged.show("seg-hostile")
    said = "/app/hostile/suid setuid: False; /app/hostile/escape: No such file or directory; " \
           "/dev/sda exists: False; /output is a link: False"
    assert said in (judged.home / "results" / str(judged.ids["seg-hostile"]) / "quiz.log").read_text()
    root = judged.prep_manifest("seg-hostile")["entry_root"]
    assert (root["devices_removed"], root["setid_cleared"]) == (1, 1) and "Dry run completed" in doc["report"]
    for name, (status, said, queued) in judged.refused.items():
        assert (status, queued) == (1, 0) and REFUSED[name] in said, (name, said)


def test_segment2025s_samples_share_one_root(judged):
    roots = {judged.prep_manifest(f"seg-{n}")["entry_root"]["digest"] for n in
             ("good", "crash", "outside", "network", "slow", "hungry")}
    assert len(roots) == 1


REPLICA_CASES = ("good", "mismatch")  # a prep failure is the same stage code: host-side tests


@pytest.fixture(scope="module")
def replica_iso(judged):
    """The ctr challenge's replica, built by the CLI as an organiser builds it."""
    iso = judged.home / "ctr-replica.iso"
    proc = vmjudge(judged.home, "replica", "build", "ctr", "-o", str(iso))
    assert "[3/3] done" in proc.stderr
    return iso


def test_the_replica_carries_the_judges_own_tools_and_no_test_record(judged, replica_iso):
    files = iso_files(replica_iso)
    for tool, path in tool_files().items():
        assert sha(files[f"/{tool}"]) == sha(path.read_bytes()), tool
    assert json.loads(files["/vmjudge/replica.json"])["kind"] == "container"
    assert not [p for p in files if "/test/" in p or "/reference/" in p]
    assert Path("/media/entry-root") == ENTRY_ROOT_REPLICA and \
        'ENTRY_ROOT = "/media/entry-root"' in (Path(build.GUEST_DIR) / "root_disk.py").read_text()


def test_the_replica_checks_a_saved_image_as_the_judge_did(judged, replica_iso):
    """The participants' guide's qemu command with the images in a FAT directory; each checked by
    `vmjudge-replica check`: stage 1 makes the root with the judge's own tools inside the replica,
    stage 2 runs the image's command in it with the judge's agent, and the verdicts, messages and
    reports are the judge's (but for the figures of what each run used)."""
    entries = judged.home / "replica-entries"
    entries.mkdir()
    for case in REPLICA_CASES:
        shutil.copyfile(judged.home / "work" / f"{case}-image.tar", entries / f"{case}-image.tar")
    argv = [str(replica_iso) if a == "replica.iso" else a.replace("fat:ro:entries", f"fat:ro:{entries}")
            for a in guide_qemu_command()]
    console = Console(argv + ["-accel", "tcg", "-display", "none"])
    try:
        console.expect(r"replica# ", BOOT_TIMEOUT)
        console.send("vmjudge-replica media; echo @@MEDIA@@ $?")
        console.expect(r"entry\? /media/vda1/good-image.tar", 120)
        assert console.expect(r"@@MEDIA@@ (\d+)", 120).group(1) == "0"
        for case in REPLICA_CASES:
            started = time.monotonic()
            output, status = console.run(f"vmjudge-replica check --json /media/vda1/{case}-image.tar", CHECK_TIMEOUT)
            print(f"replica check of {case}: {time.monotonic() - started:.1f} s")
            replica = json_line(output)
            judge = judged.show(case)
            messages = daemon_stage_messages(judged.home, judged.ids[case])
            assert replica["stages"]["prep"] == messages["prep"], case
            if case == "good":
                assert (replica["outcome"], status) == ("passed", 0), replica["report"]
                assert replica["stages"]["quiz"] == messages["quiz"]
                assert replica["training_scores"] is None  # the challenge ships no training/REFERENCE*
                assert "would now go on to stage 3" in replica["report"]
                continue
            assert (replica["outcome"], replica["failed_stage"], replica["reason"], status) == \
                (judge["outcome"], judge["failed_stage"], judge["reason"], 1), case
            assert replica["stages"] == messages
            assert without_figures(replica["report"]).split("\n", 1)[1] == \
                without_figures(judge["report"]).split("\n", 1)[1]
    finally:
        console.close()
