"""Reasons the challenge's own scorer, evaluation or data is at fault."""

from __future__ import annotations

from .reason import Reason

REASONS: tuple[Reason, ...] = (
    Reason(
        code="input-image", fault="challenge", where="quiz or exam",
        means="An input image of the challenge's record set cannot be read to check an entry's output against its "
              "grid.",
        remedy="Fix or replace that input file in the challenge directory, run `vmjudge challenge add` again, then "
               "`vmjudge rescore CHALLENGE --entries ID --rerun-stages`.",
    ),
    Reason(
        code="evaluation-failed", fault="challenge", where="score",
        means="The challenge's evaluation container exited with an error, or did not run to its end.",
        remedy="Read its output in `vmjudge show ID --organiser`, fix the evaluation image, then "
               "`vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="evaluation-ground-truth", fault="challenge", where="score",
        means="The challenge's reference directory holds no file to give the evaluation as its ground truth.",
        remedy="Put the ground truth in the reference directory, then `vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="evaluation-image", fault="challenge", where="score",
        means="The challenge's evaluation image cannot be read, is larger than [score] max_size, or is refused as an "
              "image.",
        remedy="Save the image where [score] image says (or correct it), or raise [score] max_size, then "
               "`vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="evaluation-metrics", fault="challenge", where="score",
        means="The evaluation's metrics.json is larger than [score] metrics_bytes, is not JSON, or has no finite "
              "number at [score] metric.",
        remedy="Fix the evaluation image or [score] metric and metrics_bytes in challenge.toml, then "
               "`vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="evaluation-no-metrics", fault="challenge", where="score",
        means="The evaluation ended without writing /output/metrics.json.",
        remedy="Fix the evaluation image so that it writes /output/metrics.json, then `vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="evaluation-results", fault="challenge", where="score",
        means="The entry's archived results hold no socket outputs, which an evaluation container reads.",
        remedy="Rescore the entry with the scorer that made its results, or run it again with "
               "`vmjudge rescore CHALLENGE --entries ID --rerun-stages`.",
    ),
    Reason(
        code="evaluation-timeout", fault="challenge", where="score",
        means="The evaluation did not finish within the challenge's scoring time ([limits] score in challenge.toml).",
        remedy="Make the evaluation faster or raise [limits] score in challenge.toml, then "
               "`vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="scorer-failed", fault="challenge", where="score",
        means="The challenge's isolated scorer ([score] isolate = true) raised an error, or did not run to its end.",
        remedy="Read its traceback in `vmjudge show ID --organiser`, fix the scorer, then "
               "`vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="scorer-metrics", fault="challenge", where="score",
        means="The isolated scorer returned more than the 64 KiB of scores the judge reads.",
        remedy="Make the scorer return a dict of scores only, then `vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="scorer-no-metrics", fault="challenge", where="score",
        means="The isolated scorer ended without returning its dict of scores.",
        remedy="Fix the scorer so that it returns a dict of scores, then `vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="scorer-scores", fault="challenge", where="score",
        means="What the isolated scorer returned is not JSON, or not a dict of scores the judge can use.",
        remedy="Make the scorer return a dict of the challenge's named scores, then `vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="scorer-timeout", fault="challenge", where="score",
        means="The isolated scorer did not finish within the challenge's scoring time ([limits] score in "
              "challenge.toml).",
        remedy="Make the scorer faster or raise [limits] score in challenge.toml, then `vmjudge rescore CHALLENGE`.",
    ),
    Reason(
        code="scoring-error", fault="challenge", where="score",
        means="The challenge's scorer failed on the entry's results, or its reference could not be read.",
        remedy="Read the traceback in the daemon's log, fix the scorer or the reference, then "
               "`vmjudge rescore CHALLENGE`.",
    ),
)
