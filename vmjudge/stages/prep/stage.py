"""Stage 1, prep: check the entry's components on the host, install it, run setup.sh.

Reads like the original `prep`: unpack with every member checked, look for the required
files, make sure the entry can fit in the home disk, put the entry on a CD, boot a VM with a
blank home disk, copy the entry in, run setup.sh under its limit, and keep the home disk for
the next stages.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ...errors import EntryError
from ...queue.spool import check_archive_name
from ...supervisor.job import Command, Job
from ..context import StageContext, StageOutcome, capped_text, script_argv
from .home_fit import check_fits
from .unpack import UnpackLimits, find_required, unpack


def run(ctx: StageContext) -> StageOutcome:
    ch, entry = ctx.challenge, ctx.entry
    try:
        kind = check_archive_name(entry.archive_name)
        if ctx.entry_dir.exists():
            shutil.rmtree(ctx.entry_dir)  # a retried stage starts from the archive again
        unpack(Path(entry.archive_path), kind, ctx.entry_dir,
               UnpackLimits(max_members=ch.entry.max_members, max_unpacked=ch.entry.max_unpacked))
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
    install = set_aside_submitted_answers(ctx)
    try:
        check_fits(install, ch.vm.home_mib)  # before a VM is booted only to run out of room
    except EntryError as exc:
        shutil.rmtree(install, ignore_errors=True)
        return StageOutcome("failed", f"{exc} Entry not scored.", reason=exc.reason, manifest=ctx.manifest("prep"))

    ctx.home_disk.unlink(missing_ok=True)
    ctx.runner.new_home(ctx.home_disk, ch.vm.home_mib)
    job = Job(commands=(Command("setup.sh", script_argv("setup.sh"), ch.limits.setup, output_limit=ch.limits.output),),
              media={"entry": install}, install="entry", stop_on_failure=True)
    run_ = ctx.run("prep", job, ctx.home_disk)
    setup = run_.transcript.commands[0]
    output = capped_text(bytes(setup.output), ch.limits.output, setup.truncated)
    ctx.write_log("prep", output)
    shutil.rmtree(install, ignore_errors=True)
    manifest = ctx.manifest("prep", run_)
    if setup.status == "timeout":
        return StageOutcome("failed", f"setup.sh did not finish within {ch.limits.setup:.0f} s. Entry not scored.\n"
                            f"--- setup.sh output ---\n{output}", reason="setup-timeout", manifest=manifest)
    if setup.status != "ok":
        return StageOutcome("failed", f"setup.sh failed (exit status {setup.exit_code}). Entry not scored.\n"
                            f"--- setup.sh output ---\n{output}", reason="setup-error", manifest=manifest)
    return StageOutcome("passed", f"setup.sh completed.\n--- setup.sh output ---\n{output}", manifest=manifest)


SCRIPTS = ("setup.sh", "next.sh")


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16)
    except OSError:
        return b""


def set_aside_submitted_answers(ctx: StageContext) -> Path:
    """The tree to install: the entry less its submitted answers.txt, which next.sh would
    otherwise append to (the host keeps it to compare with in stage 2)."""
    install = ctx.results_dir / "install"
    if install.exists():
        shutil.rmtree(install)
    shutil.copytree(ctx.entry_dir, install, symlinks=True)
    if ctx.challenge.results.style == "answer-lines":
        (install / ctx.challenge.results.submitted).unlink(missing_ok=True)
    return install
