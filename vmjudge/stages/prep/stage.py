"""Stage 1, prep: check the entry's components on the host, install it, run setup.sh.

Reads like the original `prep`: unpack with every member checked, look for the required
files, make sure the entry can fit in the home disk, put the entry on a CD, boot a VM with a
blank home disk, copy the entry in, run setup.sh under its limit, and keep the home disk for
the next stages. A container entry's stage 1 is container.py's: its root made on the host.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ... import private
from ...errors import EntryError
from ...vm.channel import Watch
from ...vm.job import Command, Job
from ..answers import answers_allowance
from ..context import StageContext, StageOutcome, output_text, script_argv
from ..figures import measured
from . import submission
from .container import run_container
from .home_fit import check_fits
from .unpacked import unpack_entry


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    if ch.entry.kind == "container":
        return run_container(ctx)
    if ch.entry.kind == "submission":
        return submission.run(ctx)
    try:
        unpack_entry(ctx)
    except EntryError as exc:
        return StageOutcome("failed", f"The entry could not be unpacked: {exc}", reason=exc.reason,
                            manifest=ctx.manifest("prep"))
    missing = find_required(ctx.entry_dir, list(ch.entry.required))
    if missing:
        return StageOutcome("failed", f"Missing component(s): {', '.join(missing)}. Entry not scored.",
                            reason="missing-component", manifest=ctx.manifest("prep"))
    crlf = [name for name in SCRIPTS if b"\r\n" in _head(ctx.entry_dir / name)]
    if crlf:
        return StageOutcome("failed", f"{' and '.join(crlf)} {'has' if len(crlf) == 1 else 'have'} Windows (CRLF) "
                            f"line endings, which the shell cannot run: convert with `dos2unix {' '.join(crlf)}` "
                            "and submit again. Entry not scored.", reason="bad-script", manifest=ctx.manifest("prep"))
    too_large = submitted_answers_too_large(ctx)
    if too_large:
        return StageOutcome("failed", too_large, reason="answers-too-large", manifest=ctx.manifest("prep"))
    install = set_aside_submitted_answers(ctx)
    try:
        check_fits(install, ch.vm.home_mib)  # before a VM is booted only to run out of room
    except EntryError as exc:
        shutil.rmtree(install, ignore_errors=True)
        return StageOutcome("failed", f"{exc} Entry not scored.", reason=exc.reason, manifest=ctx.manifest("prep"))

    ctx.home_disk.unlink(missing_ok=True)
    ctx.jobs.new_home(ctx.home_disk, ch.vm.home_mib)
    job = Job(commands=(Command("setup.sh", script_argv("setup.sh"), ch.limits.setup, output_limit=ch.limits.output,
                                tail_limit=ch.limits.output_tail),),
              media={"entry": install}, install="entry", stop_on_failure=True)
    try:
        with ctx.stage_log("prep") as log:
            run_ = ctx.run("prep", job, ctx.home_disk, watch=Watch(log=log))
    except EntryError as exc:  # the agent could not install it: the entry does not fit its home disk
        return StageOutcome("failed", f"{exc} Entry not scored.", reason=exc.reason, manifest=ctx.manifest("prep"))
    finally:
        shutil.rmtree(install, ignore_errors=True)
    setup = run_.transcript.commands[0]
    output = output_text(setup)
    manifest = ctx.manifest("prep", run_)
    figures = measured(ctx, run_, ("setup.sh",), ch.limits.setup, None)
    if setup.status == "timeout":
        return StageOutcome("failed", f"setup.sh did not finish within {ch.limits.setup:.0f} s. Entry not scored.\n"
                            f"--- setup.sh output ---\n{output}", reason="setup-timeout", manifest=manifest,
                            figures=figures)
    if setup.status != "ok":
        return StageOutcome("failed", f"setup.sh failed (exit status {setup.exit_code}). Entry not scored.\n"
                            f"--- setup.sh output ---\n{output}", reason="setup-error", manifest=manifest,
                            figures=figures)
    return StageOutcome("passed", f"setup.sh completed.\n--- setup.sh output ---\n{output}", manifest=manifest,
                        figures=figures)


SCRIPTS = ("setup.sh", "next.sh")


def find_required(root: Path, required: list[str]) -> list[str]:
    """The names in `required` missing under `root` ("sources/" means a directory, any
    other name a regular file), for the "missing-component" reason."""
    missing = []
    for name in required:
        path = Path(root) / name.rstrip("/")
        if path.is_symlink():
            missing.append(name)
        elif name.endswith("/"):
            if not path.is_dir():
                missing.append(name)
        elif not path.is_file():
            missing.append(name)
    return missing


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16)
    except OSError:
        return b""


def submitted_answers_too_large(ctx: StageContext) -> str | None:
    """The sentence refusing a submitted answers.txt larger than the training set can need;
    the quiz reads it into memory, and a 60 MB one would cost the judge, not the entry."""
    rule, ch = ctx.challenge.results, ctx.challenge
    if rule.style != "answer-lines":
        return None
    path = ctx.entry_dir / rule.submitted
    size = path.stat().st_size if path.is_file() else 0
    allowance = answers_allowance(len(ch.training))
    if size <= allowance:
        return None
    return (f"{rule.submitted} is {size} bytes, more than the {allowance} bytes that answers for the "
            f"{len(ch.training)} training records can need (64 KiB plus 256 bytes a record): keep one line "
            "per training record and submit again. Entry not scored.")


def set_aside_submitted_answers(ctx: StageContext) -> Path:
    """The tree to install: the entry less its submitted answers.txt, which next.sh would
    otherwise append to (the host keeps it to compare with in stage 2)."""
    install = ctx.files.install
    if install.exists():
        shutil.rmtree(install)
    shutil.copytree(ctx.entry_dir, install, symlinks=True)
    os.chmod(install, private.DIR)  # as the entry tree: the judge writes the ISO, qemu never reads here
    if ctx.challenge.results.style == "answer-lines":
        (install / ctx.challenge.results.submitted).unlink(missing_ok=True)
    return install
