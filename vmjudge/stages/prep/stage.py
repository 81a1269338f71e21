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
from ...archive.components import check_components
from ...archive.names import check_archive_name
from ...errors import EntryError
from ...vm.channel import Watch
from ...vm.job import Command, Job
from ..context import StageContext, StageOutcome, output_text, script_argv
from ..figures import measured
from . import submission
from .container import run_container
from .unpacked import listed_tree, unpack_entry


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
    try:  # what `submit` checked too (archive/components.py): an entry accepted before it did is refused here
        check_components(ch, listed_tree(ctx.entry_dir), check_archive_name(ctx.entry.archive_name, ch.entry.kind))
    except EntryError as exc:
        return StageOutcome("failed", f"{exc} Entry not scored.", reason=exc.reason, manifest=ctx.manifest("prep"))
    install = set_aside_submitted_answers(ctx)

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
