"""What `challenge add` asks of a challenge's scorer before any entry meets it (#59): that it scores an
entry that answered nothing. That reads the reference as every scoring will (the built-in scorers name a
test record with no reference line, a malformed line, an empty or missing file), so an author's mistake
is a sentence at `challenge add`, not the first participant's stage 4 failing as the judge's own trouble.

Scorers run elsewhere are not tried here: an evaluation image, or an isolated scorer, which runs only in a
VM (stage 4 says what they make of it).
"""

from __future__ import annotations

from ...config import Challenge
from ...errors import ConfigError
from ...queue.results import ExamResults
from .scoring import ScoringRules, named_scores


def answered_nothing(ch: Challenge) -> ExamResults:
    """The results of an entry that answered no test record, in the challenge's style."""
    records = tuple(ch.test)
    style = ch.results.style
    if style == "answer-lines":
        return ExamResults(records=records, answers=dict.fromkeys(records))
    if style == "sockets" and ch.sockets is not None:
        return ExamResults(records=records, outputs={r: dict.fromkeys(o.slug for o in ch.sockets.outputs)
                                                     for r in records})
    if style == "table":
        return ExamResults(records=records, rows=dict.fromkeys(records))
    return ExamResults(records=records, files=dict.fromkeys(records))


def check_reference(ch: Challenge) -> None:
    """ConfigError, naming the reference and what the scorer said, unless the scorer scores an entry
    that answered nothing on each of the challenge's test sets (each phase's)."""
    if ch.scored_in_vm:
        return
    for view in [ch.in_phase(p.name) for p in ch.phases] or [ch]:
        where = view.reference_dir
        try:
            rules = ScoringRules.load(view.scorer, where, view.score_options)
            named_scores(view.scorer, rules.function(answered_nothing(view), where))
        except Exception as exc:  # noqa: BLE001 - whatever the scorer raises is the author's to see, in its words
            phase = f" (phase {view.phase.name})" if view.phase is not None else ""
            raise ConfigError(f"The scorer {view.scorer} cannot score an entry that answered nothing against "
                              f"{where}{phase}: {exc} Fix the reference (or the scorer) and add the challenge "
                              "again.") from None
