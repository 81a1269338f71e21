"""The evaluation of one entry's current stage, as PhysioNet's `evaluate` script ran it.

The stages, their order and where each runs are vmjudge.pipeline's table. A stage that
fails ends the evaluation. Each stage is one VM boot and one row in the queue, so the
daemon can run stages of different entries side by side, and a stage that the
infrastructure (not the entry) broke is simply run again (attempts.py sorts which is which).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from ..config import Challenge, Site, load_challenge
from ..errors import Cancelled, GpuFault, ImageError, InfrastructureError
from ..images.build import find_image
from ..images.data_disk import DataDisks
from ..images.image import GuestImage
from ..pipeline import FIRST, Stage, by_name
from ..queue.db import Queue, StaleClaim
from ..queue.results import archived_results, share
from ..queue.rows import EntryRow, StageRun
from ..queue.shared_disks import shared_disks
from ..queue.spool import Spool
from ..stages.context import StageContext, StageOutcome
from ..vm import domain
from ..vm.runner import VmRunner
from .attempts import Recorder, attempt, record_outcome, write_report
from .slots import Slot, take_out

log = logging.getLogger(__name__)


def run_stage(queue: Queue, site: Site, entry: EntryRow, slot: Slot, cancel: threading.Event | None = None) -> None:
    """Run the entry's current stage once, in `slot`, and record what came of it."""
    stage = by_name(str(entry.stage))
    record = Recorder(cancel)
    try:
        run = record(f"the start of entry {entry.id}'s {stage.name} stage", queue.start_stage, entry.id, stage.name,
                     slot.number)
        outcome = attempt(queue, run, queue.host, record,
                          lambda: shared(queue, site, run, _in_slot(queue, site, entry, stage, run, slot, cancel),
                                         record))
        if outcome is None:
            return
        recorded(queue, site, run, outcome, record)
    except Cancelled:
        # The daemon stopped while the queue could not be written: the stage is still marked
        # running, and the next daemon's recovery queues it again.
        log.warning("entry %d %s: left for the next daemon to run again", entry.id, stage.name)
        return
    except StaleClaim as exc:  # another host has (or will) run this stage: what this one found is dropped
        log.warning("%s", exc)
        return
    log.info("entry %d %s: %s %s", entry.id, stage.name, outcome.status, outcome.reason or "")


def shared(queue: Queue, site: Site, run: StageRun, outcome: StageOutcome, record: Recorder) -> StageOutcome:
    """Stage 3's results put where every host finds them (results.share: the queue's database or the
    object store; with SQLite they stay in this home), before the result that names them is recorded:
    with several hosts that is what lets another host run stage 4 or rescore, and a result naming
    results no other host could fetch would leave the entry unscorable there. Part of the stage's
    attempt: a store that does not take them fails the stage as the judge's, run again (attempts.py)."""
    if outcome.results_sha256 is not None:
        record(f"entry {run.entry_id}'s stage 3 results", share, queue, site.home, outcome.results_sha256)
    return outcome


def conclude(queue: Queue, site: Site, run: StageRun, outcome: StageOutcome, record: Recorder) -> None:
    """What the entry's stage decided, into the queue, its results shared first (`shared`)."""
    recorded(queue, site, run, shared(queue, site, run, outcome, record), record)


def recorded(queue: Queue, site: Site, run: StageRun, outcome: StageOutcome, record: Recorder) -> None:
    """A decided outcome whose results are shared, into the queue; the report once the evaluation ends."""
    if record_outcome(queue, run, outcome, record):
        write_report(queue, site, run.entry_id)


def _in_slot(queue: Queue, site: Site, entry: EntryRow, stage: Stage, run: StageRun, slot: Slot,
             cancel: threading.Event | None) -> StageOutcome:
    """The stage in its slot; a GPU that failed is the card's doing, not the entry's: the slot
    stops taking stages, and the queue's retry runs this one again in another (attempts.py
    records the failure as the infrastructure's)."""
    try:
        return _run(queue, site, entry, stage, run, slot, cancel)
    except GpuFault as exc:
        take_out(queue, exc.address, str(exc))
        raise


def _run(queue: Queue, site: Site, entry: EntryRow, stage: Stage, run: StageRun, slot: Slot,
         cancel: threading.Event | None) -> StageOutcome:
    # In a contest, the entry's phase: its test set, reference and limits.
    challenge = load_challenge(queue.challenge_dir(entry.challenge)).in_phase(entry.phase)
    archived = None
    if not stage.in_vm:  # stage 4, from the archived results: on the host, or in a VM of its own
        found = archived_results(queue, site.home, entry.id)
        archived = found.sha256 if found else None
        if not challenge.scored_in_vm or archived is None:
            ctx = StageContext(site=site, challenge=challenge, image=None, entry=entry, attempt=run.attempt,
                               cancel=cancel, archived=archived)
            return stage.load()(ctx)
    if stage.name == FIRST and queue.shared:  # accepted on another host, perhaps: its bytes are in the queue
        entry = replace(entry, archive_path=str(Spool(site.layout.spool).local_copy(queue.blobs, entry.archive_sha256,
                                                                                   entry.archive_name)))
    image = _image(site, challenge)
    conn = domain.connect(site.uri)
    try:
        _say_if_larger_than_its_slot(challenge, slot)
        runner = VmRunner(conn, site, image, entry_id=entry.id,
                          attempt=run.attempt, vcpus=challenge.vm.vcpus, memory_mib=challenge.vm.memory_mib,
                          cancel=cancel, gpu=slot.gpu, cores=slot.cores, cpu_level=challenge.vm.cpu_level,
                          disks=DataDisks(site.layout.data_disks, shared_disks(queue.blobs)))
        ctx = StageContext(site=site, challenge=challenge, image=image, entry=entry, attempt=run.attempt,
                           runner=runner, cancel=cancel, archived=archived)
        return stage.load()(ctx)
    finally:
        conn.close()


def _say_if_larger_than_its_slot(challenge: Challenge, slot: Slot) -> None:
    """A challenge registered after the daemon planned its slots' cores may need more vCPUs
    than a slot has: its vCPUs then share the slot's cores (pinning.py), slowing that entry
    alone. Its timings are not comparable, which the organiser should hear."""
    if slot.cores is not None and not slot.cores.shared and challenge.vm.vcpus > len(slot.cores.cores):
        log.warning("challenge %s's VMs have %d vCPUs but %s has %d core(s): its vCPUs share them, so its timings "
                    "are not comparable; restart the daemon, which then plans for it (or refuses the site)",
                    challenge.name, challenge.vm.vcpus, slot, len(slot.cores.cores))


def _image(site: Site, challenge: Challenge) -> GuestImage:
    try:
        image = find_image(site, challenge.image)
    except ImageError as exc:
        raise InfrastructureError("image-missing", str(exc)) from None
    image.check()
    return image
