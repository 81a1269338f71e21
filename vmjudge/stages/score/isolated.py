"""Stage 4 by the challenge's own scorer file in a VM ([score] isolate = true): the organiser's code, which
the judge would otherwise import into its own process (with the judge's privileges, its database and
every entry's files within reach), is run instead by the guest's python3 in a VM of the challenge's
image, with no network and as the guest's unprivileged user (in_vm.py). The VM's CD holds the scorer
file, a copy of vmjudge's sources (so it may use vmjudge's helpers, as a host scorer does), the entry's
archived stage-3 results and the reference directory; no entry code runs in this VM.

What the scorer returned comes back as scores.json, at most SCORES_BYTES, and is checked as a host
scorer's dict is (scoring.named_scores). Whatever goes wrong (the scorer raises, overruns [limits]
score, returns no dict or a wrong one) is the challenge's fault, never the entry's: a ChallengeError,
which holds the entry for the organiser at once, with the end of what the scorer printed; `vmjudge
rescore` scores it once the scorer is fixed, in a VM the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...config import Challenge
from ...errors import ChallengeError, ScoringError
from ...files import sha256_file
from ...queue import results
from ...queue.rows import Scoring
from ...scorers.reference import reference_sha256
from ...sources import package_files
from ...vm.channel import Watch
from ...vm.job import Command, Job
from ...vm.reading import Limits
from ..context import StageContext, StageOutcome
from .container import MARGIN, collected_file
from .in_vm import ANSWER_ERROR, SCORES
from .scoring import named_scores, undefined_note

CD = "score"  # the CD's directory, linked into the home as score/
RUNNER = f"{CD}/lib/vmjudge/stages/score/in_vm.py"
SCORES_BYTES = 64 << 10  # of scores.json: a dict of numbers; more is the scorer's fault
HOME_MIB = 64  # the home disk the scorer may write in (it need write nothing)


def scorer_version(ch: Challenge) -> str:
    """As a host scorer's file is versioned (scorers/loader.py): its name, function and content's hash."""
    assert ch.isolated is not None
    return f"{ch.isolated.file.name}:{ch.isolated.function}@{sha256_file(ch.isolated.file)[:12]}"


def run(ctx: StageContext, why: str = "official") -> StageOutcome:
    """Stage 4 (`why` "official"), or a re-scoring of the entry's archived results ("rescore")."""
    stage = "score" if why == "official" else "rescore"
    ch = ctx.challenge
    isolated = ch.isolated
    assert isolated is not None and ctx.archived is not None
    command = Command("the scorer", ("python3", RUNNER, isolated.file.name, isolated.function), ch.limits.score,
                      output_limit=ch.limits.output, tail_limit=ch.limits.output_tail, links=(CD,),
                      collect=(SCORES,), file_limit=SCORES_BYTES)
    home = ctx.files.directory / "scoring-home.img"
    ctx.jobs.new_home(home, HOME_MIB)
    try:
        with ctx.stage_log(stage) as log:
            run_ = ctx.run(stage, Job(commands=(command,), media=scoring_media(ch, results.get(ctx.site.home,
                                                                                            ctx.archived))),
                           home, Limits(stage_cap=ch.limits.score + MARGIN), Watch(log=log))
    finally:
        home.unlink(missing_ok=True)
    done = run_.transcript.commands[0] if run_.transcript.commands else None
    data = collected_file(done, SCORES, ch.limits.score, "the scorer", "scorer",
                          f"the {SCORES_BYTES:,} bytes the judge reads of it", "dict of scores")
    try:
        returned = json.loads(data)
        refused = refused_answer(returned)
        if refused is not None:
            return refused
        scores = named_scores(ch.scorer, returned)
    except (ValueError, ScoringError, RecursionError) as exc:  # not JSON, too deep, or not scores
        raise ChallengeError("scorer-scores", f"the scorer's result cannot be used: {exc}") from None
    scoring = Scoring(entry_id=ctx.entry.id, why=why, scorer=ch.scorer, scorer_version=scorer_version(ch),
                      reference_sha256=reference_sha256(ch.reference_dir), results_sha256=ctx.archived, scores=scores)
    manifest = {"stage": "score", "scorer": ch.scorer, "isolated": True, "scorer_version": scoring.scorer_version,
                "reference_sha256": scoring.reference_sha256, "results_sha256": ctx.archived,
                "vm_seconds": round(run_.total_seconds, 3)}
    shown = ", ".join(f"{k} {'undefined' if v is None else format(v, '.4f')}" for k, v in scores.items())
    note = undefined_note(scores, ch.score_options)
    return StageOutcome("scored", f"Scores: {shown}.{note}", scores=scores, manifest=manifest, scoring=scoring)


def refused_answer(returned: object) -> StageOutcome | None:
    """The entry failed as on the host when the scorer refused its answers (in_vm.py's ANSWER_ERROR):
    the message the participant's, the detail the organiser's; None for anything else."""
    refused = returned.get(ANSWER_ERROR) if isinstance(returned, dict) and len(returned) == 1 else None
    if not isinstance(refused, dict):
        return None
    detail = str(refused.get("detail"))[:500]
    return StageOutcome("failed", f"{str(refused.get('message'))[:500]} Entry not scored.", reason="invalid-answer",
                        manifest={"stage": "score", "isolated": True, "refused_answer": detail})


def scoring_media(ch: Challenge, archived: bytes) -> dict[str, Path | bytes]:
    """The CD's files, all under score/: the scorer file, vmjudge's sources (lib/), the archived
    results (results.json) and the reference directory (reference/)."""
    assert ch.isolated is not None
    media: dict[str, Path | bytes] = {f"{CD}/{ch.isolated.file.name}": ch.isolated.file,
                                      f"{CD}/results.json": archived}
    media.update({f"{CD}/lib/{name}": path for name, path in package_files().items()})
    reference = [p for p in sorted(ch.reference_dir.rglob("*")) if p.is_file()]
    media.update({f"{CD}/reference/{p.relative_to(ch.reference_dir).as_posix()}": p for p in reference})
    return media
