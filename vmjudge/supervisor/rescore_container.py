"""Re-scoring in a VM: by the organiser's evaluation container ([score] kind = "container") or the
challenge's isolated scorer file ([score] isolate = true), each entry's archived stage-3 results given to
it in a VM, as stage 4 gives them (stages/score/container.py, isolated.py), and no entry VM. It stands
where rescore.py uses a host scorer's ScoringRules, with the same face: what it scores with, and a
Scoring per entry.

Its scorer version names the evaluation image (or the scorer file's hash), so a new image or scorer (or
a corrected ground truth, in the reference's hash) shows in every scoring it makes. A run that fails (the
evaluation or scorer crashed, a VM would not start) raises, and rescore.py records nothing of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import Challenge, Site
from ..errors import ImageError, ScoringError
from ..images.build import find_image
from ..images.evaluation_root import evaluation_root
from ..queue.db import Queue
from ..queue.rows import Scoring
from ..scorers.reference import reference_sha256
from ..stages.context import StageContext
from ..stages.score import isolated
from ..stages.score.stage import in_vm
from ..vm import domain
from ..vm.runner import VmRunner


@dataclass(frozen=True)
class EvaluationRun:
    site: Site
    queue: Queue
    challenge: Challenge
    scorer: str
    scorer_version: str
    reference: Path
    reference_sha256: str

    @classmethod
    def load(cls, site: Site, queue: Queue, ch: Challenge) -> EvaluationRun:
        """The evaluation's root made or found (or the scorer file's version), and the guest image its VMs
        boot (ScoringError when the image is not built: nothing can be scored)."""
        if ch.evaluation is not None:
            root = evaluation_root(site.layout, ch.evaluation)
            scorer, version = "container", f"evaluation image {root.image_id}"
        else:
            scorer, version = ch.scorer, isolated.scorer_version(ch)
        try:
            find_image(site, ch.image).check()
        except ImageError as exc:
            raise ScoringError(f"{exc} The scoring VMs boot the challenge's image.") from None
        return cls(site, queue, ch, scorer, version, ch.reference_dir, reference_sha256(ch.reference_dir))

    def score(self, home: Path, entry_id: int, results_sha256: str, why: str) -> Scoring:
        entry = self.queue.entry(entry_id)
        ch = self.challenge
        conn = domain.connect(self.site.uri)
        try:
            image = find_image(self.site, ch.image)
            runner = VmRunner(conn, self.site, image, entry_id=entry_id, attempt=1, vcpus=ch.vm.vcpus,
                              memory_mib=ch.vm.memory_mib, cpu_level=ch.vm.cpu_level)
            ctx = StageContext(site=self.site, challenge=ch, image=image, entry=entry, attempt=1, runner=runner,
                               archived=results_sha256)
            outcome = in_vm(ctx, why)
        finally:
            conn.close()
        assert outcome.scoring is not None
        return outcome.scoring
