"""Stage 1 for a container entry (#39): its root made on the host, its submitted results read
from it, and a blank home disk for the quiz and the exam. No VM and no setup step: a container
comes built.

The spooled archive is checked again with admission's own checker (the same bytes, under the
challenge's limits as they are now) rather than trusting a record of what admission found: the
checker gives the image's run settings and the chain ID the root is named by, and an archive
whose spooled copy changed since would be caught here, before any tool reads it. What the image
does wrong (too big, layers that cannot be applied, a link or a device where its submitted
results should be, results larger than the judge keeps) is the entry's verdict; a tool or the
host's disk failing is the judge's (InfrastructureError, retried).

Whether the root was made or found made must not show (issue 54): found, it tells that someone
sent the same layers before. The stage records what getting its root took and what making it
took (or took once, by the root's record) under publish.PREP_TIMING, and the queue publishes the
stage's end, passed or failed, as if it had made the root, rounded up to a whole step
(queue/publish.py): no VM slot and no time of the daemon's is spent on it.
"""

from __future__ import annotations

import time
from pathlib import Path

from ... import private
from ...archive.checks import check_container
from ...errors import EntryError
from ...images.entry_root import held_root
from ...images.root_files import ResultBounds, read_submitted
from ...images.root_use import RootUse
from ...queue.publish import PREP_TIMING
from ..context import StageContext, StageOutcome
from ..records import RESULT_FILE_LIMIT


def run_container(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    manifest = ctx.manifest("prep")
    archive = Path(ctx.entry.archive_path)
    bounds = ResultBounds(per_file=max(RESULT_FILE_LIMIT, ch.limits.output), total=ch.limits.stage_results)
    try:
        image = check_container(ch, ctx.entry.challenge, archive, given_name=ctx.entry.archive_name)
        manifest["entry_image"] = image.as_dict()
        # The root's lock is held until the entry's use of it is recorded: gc never removes it between.
        getting = time.monotonic()
        with held_root(ctx.site.layout, archive, image, ch.entry.max_unpacked) as root:
            took = time.monotonic() - getting
            # reused: the organiser's alone; a participant told so would learn that someone had
            # submitted an image with the same layers. So is the stage's end (queue/publish.py).
            manifest["entry_root"] = {**root.manifest(), "reused": root.reused, "path": str(root.path)}
            if ctx.publish_prep:
                made = _making(root.made_seconds, root.seconds) if root.reused else took
                manifest[PREP_TIMING] = {"root_seconds": round(took, 3), "made_seconds": round(made, 3)}
            private.fresh_dir(ctx.entry_dir)
            found = read_submitted(root.path, {r: ch.results.submitted_path(r) for r in ch.training},
                                   ctx.entry_dir, bounds) if ch.quiz_check == "submitted" else None
            RootUse(root.path, root.digest, root.squashfs_bytes, image.config).save(ctx.files.entry_root)
    except EntryError as exc:
        return StageOutcome("failed", f"{exc} Entry not scored.", reason=exc.reason, manifest=manifest)
    ctx.home_disk.unlink(missing_ok=True)
    ctx.jobs.new_home(ctx.home_disk, ch.vm.home_mib)  # formatted in the quiz's VM, on its overlay
    held = "" if found is None else f"; the image holds submitted results for {found} of the " \
        f"{len(ch.training)} training records ({ch.results.submitted})"
    return StageOutcome("passed", f"The image's root file system is ready ({root.files} files, "
                        f"{root.unpacked_bytes / 1e6:.1f} MB){held}.", manifest=manifest)


def _making(made_seconds: float | None, steps: dict[str, float]) -> float:
    """What making a reused root took: its record's total, else the sum of its steps'."""
    return made_seconds if made_seconds is not None else sum(steps.values())
