"""Inside the booted replica, stages 1 and 2 on an entry, as the judge runs them
(`vmjudge-replica check`, whose command line is cli/replica_check.py).

The stages are the judge's own code (vmjudge.stages.prep and .quiz, recorded through
supervisor.attempts.record_outcome into a queue database of the same schema), with one difference:
jobs run through LocalRunner instead of a VM. So the messages, the verdict and the report
text are those the judge would give for stages 1 and 2. Only the standard library and
vmjudge's pure-Python modules are imported: the guest root has no click, libvirt or pycdlib.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..archive.checks import check_archive, check_container
from ..config import Challenge, Site, load_challenge
from ..errors import EntryError, VmjudgeError
from ..files import sha256_file
from ..images.image import GuestImage
from ..pipeline import PIPELINE
from ..queue.db import Queue
from ..queue.results import ExamResults
from ..reports.report import show
from ..scorers.loader import load_scorer
from ..stages.answers import parse_answer_lines
from ..stages.context import StageContext
from ..supervisor.attempts import record_outcome, write_report
from ..terminal import printable
from .cpu_match import warning
from .local import LocalRunner

REPLICA_DIR = Path("/media/replica/vmjudge")
WORK = Path("/var/lib/vmjudge-replica")
MEDIA_ROOT = Path("/media")
NOT_OFFICIAL = "NOT the official score: training records, whose answers the entry itself submitted"
NEXT_LINE = ("Stages 1 and 2 passed. On the judge this entry would now go on to stage 3 (exam) on the "
             "hidden test set, then be scored.")


def say(text: str = "", **kwargs: object) -> None:
    """How the replica prints: reports quote the entry's own output, and names come from the
    participant's drives, so every control character is shown escaped (terminal.py)."""
    print(printable(text), **kwargs)  # type: ignore[call-overload]


def _archive_directory(directory: Path, out_dir: Path, kind: str = "archive") -> Path:
    """A directory entry becomes the tar.gz the judge would receive (members sorted, no links); a
    submission's, the zip DrivenData's `make pack-submission` makes of its folder."""
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in directory.resolve().name) or "my"
    if kind == "submission":
        out = out_dir / f"{name}-submission.zip"
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(directory.rglob("*")):
                if not path.is_symlink():
                    zf.write(path, str(path.relative_to(directory)))
        return out
    out = out_dir / f"{name}-entry.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory)), recursive=False)
    return out


def training_scores(ch: Challenge, entry_dir: Path) -> dict[str, float] | None:
    """The entry's submitted training answers (stage 2 proved next.sh reproduces them) scored
    with the challenge's scorer against training/REFERENCE* (a phase's own training set: its
    REFERENCE*); None when there is no reference, or the challenge has sockets (its entries submit
    no answers: their quiz checks each case's outputs as it runs)."""
    training = ch.set_dir("training")
    if ch.sockets is not None or ch.isolated is not None or not any(training.glob("REFERENCE*")):
        return None  # an isolated scorer is the organiser's code, run by the judge in a VM only
    rule = ch.results
    if rule.style == "answer-lines":
        source = entry_dir / rule.submitted
        answers = parse_answer_lines(source.read_bytes() if source.is_file() else None)
        results = ExamResults(records=ch.training, answers={r: answers.get(r) for r in ch.training})
    else:
        files = {}
        for r in ch.training:
            p = entry_dir / rule.stored_path(r)
            files[r] = p.read_bytes() if p.is_file() else None
        results = ExamResults(records=ch.training, files=files)
    return load_scorer(ch.scorer)(results, training)


def replica_phase(replica_dir: Path) -> str | None:
    """The phase the replica was built for (replica.json), None for a challenge's own."""
    meta = replica_dir / "replica.json"
    return json.loads(meta.read_text()).get("phase") if meta.is_file() else None


def check(entry: Path, replica_dir: Path = REPLICA_DIR, work: Path = WORK, score: bool = True,
          progress: Callable[[str], None] = lambda m: say(m, file=sys.stderr, flush=True)) -> dict[str, Any]:
    # A contest's replica is built for one phase (replica.json names it): its training set and image.
    ch = load_challenge(replica_dir / "challenge").in_phase(replica_phase(replica_dir))
    image = GuestImage.load(replica_dir)
    cpu_warning = warning(json.loads((replica_dir / "replica.json").read_text()).get("cpu"))
    if cpu_warning:
        progress(cpu_warning)
    if work.exists():
        for old in work.glob("check-*"):
            shutil.rmtree(old, ignore_errors=True)
    home = work / f"check-{os.getpid()}"
    home.mkdir(parents=True)
    site = Site(home=home, uri="replica", accel="replica")
    container = ch.entry.kind == "container"
    if entry.is_dir() and not container:
        archive = _archive_directory(entry, home, ch.entry.kind)
        progress(f"{entry} is a directory: checking it as the archive {archive.name}")
    elif entry.is_file():
        archive = entry
    elif container:
        raise EntryError("no-entry", f"{entry} is not a file: give the path of your saved image (a .tar or .tar.gz, "
                         "from `docker save`); `vmjudge-replica media` lists them.")
    else:
        raise EntryError("no-entry", f"{entry} does not exist: give the path of your entry archive "
                         "(NAME-entry.zip or NAME-entry.tar.gz) or directory; `vmjudge-replica media` lists them.")
    if container:
        check_container(ch, ch.name, archive)
    else:
        check_archive(ch, ch.name, archive)
    queue = Queue(site.layout.queue_db)
    queue.add_challenge(ch.name, ch.directory, image.key)
    entry_id = queue.add_entry(ch.name, "participant", False, sha256_file(archive), archive.name, archive.resolve())
    titles = {"prep": "stage 1 (prep): the image's root file system (skopeo, umoci, mksquashfs)" if container
              else "stage 1 (prep): unpacking, installing, setup.sh",
              "quiz": f"stage 2 (quiz): {'the image' if container else 'next.sh'} on {len(ch.training)} training "
                      f"{'cases' if ch.sockets is not None else 'records'}"}
    if ch.submission is not None:  # DrivenData's `make test-submission`: the judge's own check of the sample
        titles = {"prep": "stage 1 (prep): unpacking, installing",
                  "quiz": f"stage 2 (quiz, the smoke test): the submission over the sample's {len(ch.training)} rows, "
                          "its submission.csv checked against the format"}
    for stage in PIPELINE[:2]:  # up to the quiz: the replica has no test records
        row = queue.entry(entry_id)
        if row.state != "queued":
            break
        progress(f"{titles[stage.name]} ...")
        queue.claim_next(only=entry_id)
        run = queue.start_stage(entry_id, stage.name, 0)
        runner = LocalRunner(site, site.layout.results_of(entry_id, make=True), run.attempt, ch.vm.home_mib)
        ctx = StageContext(site=site, challenge=ch, image=image, entry=row, attempt=run.attempt, runner=runner,
                           publish_prep=False)
        if record_outcome(queue, run, stage.load()(ctx)):
            write_report(queue, site, entry_id)
    row = queue.entry(entry_id)
    doc = show(site, queue, entry_id)
    report = doc["report"]
    passed = row.state == "queued" and row.stage == "exam"
    if passed:
        lines = report.rstrip("\n").split("\n")
        report = "\n".join(lines[:-1] + [NEXT_LINE]) + "\n"
    stages = {r.stage: r.message for r in queue.stage_runs(entry_id)}
    result = {"challenge": ch.name, "archive": archive.name,
              "outcome": "passed" if passed else doc["outcome"],
              "failed_stage": doc["failed_stage"], "reason": doc["reason"], "stages": stages,
              "report": report, "results_dir": str(site.layout.results_of(entry_id).directory), "training_scores": None,
              "cpu_warning": cpu_warning}
    if passed and score:
        try:
            result["training_scores"] = training_scores(ch, site.layout.results_of(entry_id).entry)
        except VmjudgeError as exc:
            result["training_scores_error"] = str(exc)
    return result


def print_report(result: dict) -> None:
    say("=" * 72)
    say("vmjudge REPLICA check: stages 1 and 2 as the judge runs them (not an official evaluation)")
    say("=" * 72)
    if result.get("cpu_warning"):
        say(result["cpu_warning"])
    say(result["report"], end="")
    scores = result.get("training_scores")
    if scores:
        say()
        say(f"Training-set score ({NOT_OFFICIAL}):")
        for k, v in scores.items():
            say(f"  {k:<14} {v:.4f}")
    elif result.get("training_scores_error"):
        say(f"\nNo training-set score: {result['training_scores_error']}")
    say(f"\nLogs (each command's output): {result['results_dir']}")


def media(root: Path = MEDIA_ROOT) -> list[Path]:
    """Mount every attached disk and CD (not the replica CD) read-only under /media/NAME, and
    list what looks like an entry: *entry.zip, *entry.tar.gz, a directory with next.sh, or a
    saved image, *.tar, *.tar.gz or *.tgz."""
    mounted_devs = {line.split()[0] for line in Path("/proc/mounts").read_text().splitlines()}
    replica_dev = next((line.split()[0] for line in Path("/proc/mounts").read_text().splitlines()
                        if line.split()[1] == "/media/replica"), None)
    replica_name = replica_dev.removeprefix("/dev/") if replica_dev else None
    for dev in sorted(Path("/sys/class/block").iterdir()):
        name = dev.name
        if name.startswith(("loop", "ram")) or f"/dev/{name}" in mounted_devs or name == replica_name:
            continue
        if (dev / "partition").exists() and dev.resolve().parent.name == replica_name:
            continue  # a partition of the replica stick (its isohybrid or EFI partition)
        if (dev / "holders").is_dir() and any((dev / "holders").iterdir()):
            continue  # in use by a loop or device-mapper device
        target = root / name
        target.mkdir(parents=True, exist_ok=True)
        for options in (["-o", "ro,fmask=0133,dmask=0022", "-t", "vfat"], ["-o", "ro", "-t", "iso9660"],
                        ["-o", "ro,noload"]):
            if subprocess.run(["mount", *options, f"/dev/{name}", str(target)], capture_output=True).returncode == 0:
                say(f"/dev/{name} mounted read-only on {target}")
                break
        else:
            target.rmdir()
    found: list[Path] = []
    for base in sorted(p for p in root.iterdir() if p.is_dir() and os.path.ismount(p) and p.name not in
                       ("replica", "cdrom")):
        found.extend(path for path in sorted(base.rglob("*"))
                     if (path.is_file() and path.name.endswith(("entry.zip", ".tar", ".tar.gz", ".tgz")))
                     or (path.is_dir() and (path / "next.sh").is_file()))
    return found


def info(replica_dir: Path = REPLICA_DIR) -> dict:
    meta = json.loads((replica_dir / "replica.json").read_text())
    image = GuestImage.load(replica_dir)
    return {"challenge": meta["challenge"], **({"phase": meta["phase"]} if "phase" in meta else {}),
            "image": image.key, "cpu": meta.get("cpu"), "kernel_version": image.manifest.get("kernel_version"),
            "agent_version": image.manifest.get("agent_version"),
            "sha256": {name: sha256_file(replica_dir / name) for name in image.manifest["sha256"]},
            "manifest_sha256": image.manifest["sha256"],
            # The challenge's own software: what its build script installed, so a participant sees it is here.
            "build": image.manifest.get("build")}
