"""Re-scoring: organisers fix a scorer or a reference label, or take late entries, and
score again, as a scripted, reproducible batch job.

Scores are computed again from each entry's archived stage-3 results through the same
code as stage 4 (scoring.ScoringRules), so no entry VM is started; a challenge scored by its
evaluation container runs it again, in a VM per entry (rescore_container.py). Every re-scoring is recorded
as a new scoring with what it used; the entry's current scores become the new ones and the
earlier ones stay in its history. All new scores are computed first and recorded in one
transaction, so an interrupted or refused run records nothing. With rerun=True the entries
are instead queued again from stage 1, for the daemon.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import Challenge, Site, load_challenge
from ..errors import AnswerError, ArchiveError, ChallengeError, ScoringError, VmjudgeError
from ..queue.db import Queue
from ..queue.results import archived_results, fetch
from ..queue.rows import EntryRow, Scoring
from ..reports.report import write_html
from ..stages.score.scoring import ScoringRules
from .evaluate import run_stage
from .rescore_container import EvaluationRun
from .slots import Slot


@dataclass
class EntryOutcome:
    """What became of one chosen entry. status: rescored | requeued | refused."""

    entry_id: int
    status: str
    owner: str | None = None
    late: bool | None = None
    old: dict[str, float | None] | None = None
    new: dict[str, float | None] | None = None
    results_sha256: str | None = None
    problem: str | None = None  # why it was refused: one sentence saying what to do

    def line(self) -> str:
        who = f"entry {self.entry_id}" + (f" ({self.owner}{', late' if self.late else ''})" if self.owner else "")
        if self.status == "refused":
            return f"{who}: not done: {self.problem}"
        if self.status == "requeued":
            return f"{who}: queued again from stage 1"
        key = main_key(self.new or {})
        old = f"{self.old[key]:.4f}" if self.old and key in self.old else "none"
        changed = self.changed_keys
        said = f"changed: {', '.join(changed)}" if changed else "unchanged"
        return f"{who}: {key} {old} -> {(self.new or {})[key]:.4f} ({said})"

    @property
    def changed_keys(self) -> list[str]:
        """The scores that differ from the entry's previous ones beyond float rounding (1e-9),
        and any score that appeared or went away."""
        if self.status != "rescored":
            return []
        old, new = self.old or {}, self.new or {}
        return sorted(k for k in set(old) | set(new)
                      if k not in old or k not in new or not _same(old[k], new[k]))


@dataclass
class RescoreReport:
    challenge: str
    mode: str  # rescore | rerun
    phase: str | None = None  # the contest phase worked on
    scorer: str | None = None
    scorer_version: str | None = None
    reference: str | None = None
    reference_sha256: str | None = None
    entries: list[EntryOutcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every chosen entry was re-scored (or queued again): the exit status."""
        return all(e.status != "refused" for e in self.entries)

    def summary(self) -> str:
        done = sum(1 for e in self.entries if e.status != "refused")
        verb = "re-scored" if self.mode == "rescore" else "queued again"
        text = f"{verb} {done} of {len(self.entries)} chosen entries of {self.challenge}" + (
            f" phase {self.phase}" if self.phase else "")
        if self.mode == "rescore":
            text += f" (scorer {self.scorer_version}, reference {str(self.reference_sha256)[:12]})"
            text += f": {self.changed} with changed scores"
        refused = len(self.entries) - done
        return text + (f"; {refused} not done, see above" if refused else "")

    @property
    def changed(self) -> int:
        return sum(1 for e in self.entries if e.changed_keys)

    def as_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "entries" and (k != "phase" or v is not None)},
                "ok": self.ok,
                "done": sum(1 for e in self.entries if e.status != "refused"),
                "refused": sum(1 for e in self.entries if e.status == "refused"),
                **({"changed": self.changed} if self.mode == "rescore" else {}),
                "entries": [{**asdict(e), "changed": e.changed_keys} for e in self.entries]}

    def write_csv(self, path: Path) -> None:
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["entry", "owner", "late", "status", "score_name", "old_score", "new_score", "scorer_version",
                          "reference_sha256", "results_sha256", "changed", "problem"])
            for e in self.entries:
                key = main_key(e.new or e.old or {})
                out.writerow([e.entry_id, e.owner or "", "" if e.late is None else int(e.late), e.status,
                              key if (e.new or e.old) else "", _number(e.old, key), _number(e.new, key),
                              self.scorer_version or "", self.reference_sha256 or "", e.results_sha256 or "",
                              " ".join(e.changed_keys), e.problem or ""])


def main_key(scores: dict[str, float | None]) -> str:
    """The score that ranks ("score"), else the first one the scorer gave."""
    return "score" if "score" in scores or not scores else next(iter(scores))


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:  # a part the scorer left undefined
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _number(scores: dict[str, float | None] | None, key: str) -> str:
    return repr(scores[key]) if scores and key in scores else ""


def phase_of(ch: Challenge, phase: str | None) -> Challenge:
    """The challenge as its phase `phase` scores entries: a contest's phases each have their own
    reference, so a re-scoring of one must name its phase."""
    if phase is None and ch.phases:
        raise VmjudgeError(f"challenge {ch.name} has phases, each scored against its own reference: name the phase "
                           f"to work on with --phase ({', '.join(p.name for p in ch.phases)}).")
    return ch.in_phase(phase)


def choose(queue: Queue, challenge: str, ids: Iterable[int], which: str,
           keep: Callable[[EntryRow], bool], phase: str | None = None) -> tuple[list[EntryRow], list[EntryOutcome]]:
    """The entries to work on, and a refusal for each asked-for id that cannot be: given `ids`,
    exactly those; otherwise the challenge's entries of `which` kind (of the contest phase
    `phase`) that `keep` accepts."""
    queue.challenge_dir(challenge)  # an unknown challenge is refused with its own sentence
    ids = list(dict.fromkeys(ids))
    if not ids:
        late = {"official": (False,), "late": (True,), "all": (False, True)}[which]
        return [e for e in queue.entries()
                if e.challenge == challenge and e.phase == phase and e.late in late and keep(e)], []
    chosen, refused = [], []
    for entry_id in ids:
        try:
            entry = queue.entry(entry_id)
        except VmjudgeError as exc:
            refused.append(EntryOutcome(entry_id, "refused", problem=str(exc)))
            continue
        if entry.challenge != challenge:
            refused.append(EntryOutcome(entry_id, "refused", entry.owner, entry.late,
                                        problem=f"entry {entry_id} belongs to challenge {entry.challenge}, not "
                                                f"{challenge}: leave it out or rescore {entry.challenge}."))
            continue
        if entry.phase != phase:
            refused.append(EntryOutcome(entry_id, "refused", entry.owner, entry.late,
                                        problem=f"entry {entry_id} is an entry of phase {entry.phase}, not {phase}: "
                                                f"leave it out or name its phase with --phase {entry.phase}."))
            continue
        chosen.append(entry)
    return chosen, refused


def rescore(site: Site, queue: Queue, challenge: str, ids: Iterable[int] = (), which: str = "official",
            scorer: str | None = None, reference: Path | None = None,
            progress: Callable[[int, int], None] | None = None, phase: str | None = None) -> RescoreReport:
    """Score the chosen entries again from their archived results; see the module's docstring.
    The default choice is every entry of `which` kind (of the contest's phase `phase`, whose
    reference is used) that was scored or is being scored. Raises ScoringError (nothing
    recorded) when the scorer or the reference is at fault."""
    ch = phase_of(load_challenge(queue.challenge_dir(challenge)), phase)
    if ch.scored_in_vm and scorer is None:  # an evaluation container or an isolated scorer, in a VM per entry
        if reference is not None:
            raise ScoringError(f"{challenge} is scored in a VM, which reads its reference from {ch.reference_dir}: "
                               "correct the files there and run the rescore without --reference.")
        rules: ScoringRules | EvaluationRun = EvaluationRun.load(site, queue, ch)
    else:
            rules = ScoringRules.load(scorer or ch.scorer, reference if reference is not None else ch.reference_dir,
                                  ch.score_options)
    report = RescoreReport(challenge, "rescore", phase, rules.scorer, rules.scorer_version, str(rules.reference),
                           rules.reference_sha256)
    archived = queue.latest_exam_results(challenge)

    def scored_or_scoring(e: EntryRow) -> bool:
        """In the default set: every scored entry (one whose archive is gone is reported), and
        any with archived results that is not done yet (reported: the daemon has it)."""
        return e.outcome == "scored" or (e.state != "done" and e.id in archived)

    entries, refused = choose(queue, challenge, ids, which, scored_or_scoring, phase)
    outcomes: dict[int, EntryOutcome] = {o.entry_id: o for o in refused}
    scorings: list[Scoring] = []
    for done, entry in enumerate(entries, start=1):
        outcome = EntryOutcome(entry.id, "refused", entry.owner, entry.late, old=entry.scores)
        outcomes[entry.id] = outcome
        if scorer is None and reference is None and entry.id in archived and _held(site, queue, entry, outcome):
            continue
        try:
            found = archived.get(entry.id) or archived_results(queue, site.home, entry.id)
            if found is not None:
                fetch(queue, site.home, found.sha256)
            outcome.problem = _not_rescorable(entry, found is not None)
        except ArchiveError as exc:  # an older home's results file that cannot be read
            found, outcome.problem = None, str(exc)
        if outcome.problem is None and found is not None:
            outcome.results_sha256 = found.sha256
            try:
                scoring = rules.score(site.home, entry.id, found.sha256, "rescore")
            except AnswerError as exc:  # this entry's own answers: the others go on
                outcome.problem = f"{exc} ({exc.detail})"  # for the organiser, who runs rescore
            except ArchiveError as exc:
                outcome.problem = str(exc)
            except (ScoringError, ChallengeError) as exc:
                raise ScoringError(f"{str(exc).rstrip('.')}; nothing was recorded (at entry {entry.id}).") from exc
            except Exception as exc:  # the organiser's scorer: say where it broke, record nothing
                raise ScoringError(f"The scorer {rules.scorer} failed on entry {entry.id} ({type(exc).__name__}: "
                                   f"{exc}): fix it and run the rescore again; nothing was recorded.") from exc
            else:
                scorings.append(scoring)
                outcome.new = scoring.scores
        if progress is not None:
            progress(done, len(entries))
    recorded = set(queue.record_rescores(scorings))
    for scoring in scorings:
        outcome = outcomes[scoring.entry_id]
        if scoring.entry_id in recorded:
            outcome.status = "rescored"
            write_html(queue, site, scoring.entry_id)
        else:
            outcome.new = None
            outcome.problem = (f"entry {scoring.entry_id} was put back in the queue while it was re-scored: "
                               "rescore it once the daemon has finished it.")
    report.entries = [outcomes[k] for k in sorted(outcomes)]
    return report


def _held(site: Site, queue: Queue, entry: EntryRow, outcome: EntryOutcome) -> bool:
    """An entry the challenge's scorer failed on (held at stage 4) scored now, for real, by its stage 4 with the
    challenge as it is now; True when it was held (its outcome says what became of it)."""
    if entry.state != "parked" or entry.stage != "score" or not queue.resume_held(entry.id):
        return False
    claim = queue.claim_next(only=entry.id)
    if claim is None:  # a daemon took it first: it scores it
        outcome.status = "requeued"
        return True
    run_stage(queue, site, claim, Slot(0))
    after = queue.entry(entry.id)
    if after.state == "done" and after.outcome == "scored":
        outcome.status, outcome.new = "rescored", after.scores
    else:
        outcome.problem = (f"entry {entry.id} is {after.state} ({after.reason}) at stage {after.stage} again: the "
                           "scorer still fails on it (the daemon's log has its traceback).")
    return True


def _not_rescorable(entry: EntryRow, has_results: bool) -> str | None:
    """Why an entry cannot be re-scored now, in one sentence; None when it can."""
    if entry.state in ("queued", "running"):
        return (f"entry {entry.id} is {entry.state} (stage {entry.stage}): wait until the daemon has finished it, "
                "then rescore it.")
    if entry.state == "parked":
        return (f"entry {entry.id} is parked ({entry.reason}) at stage {entry.stage}: fix the problem and run it "
                "again with --rerun-stages.")
    if not has_results:
        return (f"entry {entry.id} has no archived stage-3 results"
                + (" although it was scored" if entry.outcome == "scored" else f" (outcome {entry.outcome})")
                + ": run it again with --rerun-stages.")
    if entry.outcome != "scored":
        return (f"entry {entry.id} was not scored (outcome {entry.outcome}): only scored entries can be re-scored; "
                "run it again with --rerun-stages.")
    return None


def rerun(site: Site, queue: Queue, challenge: str, ids: Iterable[int] = (), which: str = "official",
          progress: Callable[[int, int], None] | None = None, phase: str | None = None) -> RescoreReport:
    """Queue the chosen entries (default: every entry of `which` kind, of the contest's phase
    `phase`) again from stage 1, as a new evaluation that the daemon runs, in the phase they
    belong to; entries queued or running are refused."""
    phase_of(load_challenge(queue.challenge_dir(challenge)), phase)
    entries, refused = choose(queue, challenge, ids, which, lambda e: True, phase)
    outcomes = {o.entry_id: o for o in refused}
    for done, entry in enumerate(entries, start=1):
        outcome = EntryOutcome(entry.id, "refused", entry.owner, entry.late, old=entry.scores)
        outcomes[entry.id] = outcome
        # Several hosts: any host can run it again from the archive's bytes in the database.
        if not (Path(entry.archive_path).is_file() or (queue.shared and queue.blobs.has(entry.archive_sha256))):
            outcome.problem = (f"entry {entry.id}'s archive {entry.archive_path} is missing from the spool: "
                               "restore it from a backup before running the entry again.")
        else:
            try:
                queue.rerun(entry.id)
                outcome.status = "requeued"
            except VmjudgeError as exc:
                outcome.problem = str(exc)
        if progress is not None:
            progress(done, len(entries))
    return RescoreReport(challenge, "rerun", phase, entries=[outcomes[k] for k in sorted(outcomes)])
