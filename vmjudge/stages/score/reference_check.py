"""What `challenge add` asks of a challenge's scorer before any entry meets it, so that an author's mistake
is a sentence at `challenge add`, not the first participant's stage 4 failing as the judge's own trouble:

- that it scores an entry that answered nothing (#59). That reads the reference as every scoring will
  (the built-in scorers name a test record with no reference line, a malformed line, an empty or
  missing file);
- for a built-in scorer, that the reference scores its best against itself: an entry whose answers
  are the reference's own must get the score a perfect entry gets. A test set no entry can score best
  on (a class, a beat or a lesion missing where the scorer needs one, a submission format the scorer
  cannot read) is the author's to fix before anyone is ranked on it.

The reference's own answers are tried only where its format holds what an entry gives, so that the answers
are the reference's and not the judge's guess: REFERENCE.csv's labels as answer lines or as a submission's
rows (accuracy, af2017, alarms2015, heart2016); each record's reference file as its output file, or as the
[score] socket's file (beats2014's RECORD.atr, dice's REFERENCE-RECORD.mha); test_labels.csv's rows as a
submission's (youth_mental_health). Not tried: a label as a file or a socket's value, a file as an answer
line or a row (the scorer refuses results of that style, which the first check has said); and cindex in
any style, its reference holding times and events, not the risk an entry answers (OWN_ANSWERS, NOT_TRIED).

Scorers run elsewhere are not tried here: an evaluation image, or an isolated scorer, which runs only in a
VM (stage 4 says what they make of it). Nor is a challenge's own scorer tried against its reference: only
its author knows what its best is.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping

from ...config import Challenge
from ...config.submission import read_format, set_formats
from ...errors import ConfigError
from ...queue.results import ExamResults
from ...scorers.builtin import youth_mental_health
from ...scorers.loader import builtin_names
from ...scorers.reference import read_reference_csv, reference_rows
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


def label_answers(ch: Challenge, fields: int) -> ExamResults | None:
    """REFERENCE.csv's answers ("RECORD,LABEL[,MORE]": the LABEL, as an entry answers) as an entry's
    answer lines, or as a submission's rows with the label in each column its format has beside the id
    (a format of more than one is refused by the scorer, which reads one label per id, as it would refuse
    every submission). None for files and sockets: a label is no file, and the scorers of labels refuse
    such results (the check of an entry that answered nothing has said so)."""
    records = tuple(ch.test)
    table = read_reference_csv(ch.reference_dir, (None,) * fields, f"RECORD and {fields} value(s)")
    labels = {record: values[0] for record, values in reference_rows(ExamResults(records), table, ch.reference_dir)}
    if ch.results.style == "answer-lines":
        return ExamResults(records=records, answers=labels)
    if ch.results.style != "table" or ch.submission is None:
        return None
    columns = {i: fmt.columns[1:] for path in set_formats(ch.set_dir("test"), ch.submission)
               for fmt in [read_format(path)] for i in fmt.ids}
    return ExamResults(records=records, rows={r: dict.fromkeys(columns.get(r, ()), labels[r]) for r in records})


def file_answers(ch: Challenge, name: str) -> ExamResults | None:
    """Each test record's reference file (`name`, e.g. "{record}.atr"), its bytes as the entry's output
    file, or with sockets as what the case left for the [score] socket (the other outputs none: the
    reference has nothing for them, and the scorer reads only that one). None for answer lines and
    rows, which hold no file."""
    records = tuple(ch.test)
    files = {r: (ch.reference_dir / name.format(record=r)).read_bytes() for r in records}
    if ch.results.style == "files":
        return ExamResults(records=records, files=files)
    if ch.results.style == "sockets" and ch.sockets is not None:
        scored = ch.score_options.socket
        return ExamResults(records=records, outputs={r: {o.slug: files[r] if o.slug == scored else None
                                                         for o in ch.sockets.outputs} for r in records})
    return None


def labels_table_answers(ch: Challenge) -> ExamResults | None:
    """reference/test_labels.csv's rows (uid, then a column per variable) as a submission's rows, by uid;
    None unless the results are a submission's table."""
    if ch.results.style != "table":
        return None
    rows, _ = youth_mental_health.read_labels(ch.reference_dir / youth_mental_health.LABELS)  # as it scores
    return ExamResults(records=tuple(ch.test), rows={r: rows.get(r) for r in ch.test})


# The built-in scorers whose reference holds what an entry answers: each one's best score (what an entry
# answering every test record as the reference does must get) and how its reference gives those answers.
# Every one of them scores in [0, 1], 1 for an entry that is right everywhere: accuracy (all correct),
# af2017 (a mean of F1s), alarms2015 ((TP+TN)/(TP+TN+FP+5·FN)), heart2016 ((Se+Sp)/2), beats2014 (a mean
# of Se and +P), dice (a mean of Dice) and youth_mental_health (a weighted mean of F1s).
OWN_ANSWERS: Mapping[str, tuple[float, Callable[[Challenge], ExamResults | None]]] = {
    "accuracy": (1.0, functools.partial(label_answers, fields=1)),
    "af2017": (1.0, functools.partial(label_answers, fields=1)),
    "alarms2015": (1.0, functools.partial(label_answers, fields=1)),
    "heart2016": (1.0, functools.partial(label_answers, fields=2)),  # RECORD,LABEL,QUALITY: the answer is LABEL
    "beats2014": (1.0, functools.partial(file_answers, name="{record}.atr")),
    "dice": (1.0, functools.partial(file_answers, name="REFERENCE-{record}.mha")),
    "youth_mental_health": (1.0, labels_table_answers),
}
# The built-ins not tried, and why. cindex: its best is 1 (every comparable pair in order), but its
# reference holds each record's time and event, not the risk an entry answers; a risk made from them
# (minus the time, say) would be the judge's guess at an answer, and one that ties the pairs a perfect
# risk orders (an event and a censoring at the same time), so its score would say nothing of the reference.
NOT_TRIED: Mapping[str, str] = {
    "cindex": "its reference holds times and events, not the risks an entry answers",
}


def own_answers_scores(ch: Challenge) -> tuple[float, dict[str, float | None]] | None:
    """(the scorer's best, the scores of the reference's own answers given as an entry's), scored as stage 4
    scores (ScoringRules, named_scores); None when the scorer is not a built-in of OWN_ANSWERS or the
    results' style is not one its reference holds answers in. Raises whatever reading or scoring raises."""
    if ch.scored_in_vm or ch.scorer not in OWN_ANSWERS or ch.scorer not in builtin_names():
        return None
    best, read = OWN_ANSWERS[ch.scorer]
    results = read(ch)
    if results is None:
        return None
    rules = ScoringRules.load(ch.scorer, ch.reference_dir, ch.score_options)
    return best, named_scores(ch.scorer, rules.function(results, ch.reference_dir))


def check_reference(ch: Challenge) -> None:
    """ConfigError, naming the reference and what the scorer said, unless the scorer scores an entry
    that answered nothing on each of the challenge's test sets (each phase's), and, a built-in scorer,
    the reference's own answers as its best."""
    if ch.scored_in_vm:
        return
    for view in [ch.in_phase(p.name) for p in ch.phases] or [ch]:
        where = view.reference_dir
        phase = phase_named(view)
        try:
            rules = ScoringRules.load(view.scorer, where, view.score_options)
            named_scores(view.scorer, rules.function(answered_nothing(view), where))
        except Exception as exc:  # noqa: BLE001 - whatever the scorer raises is the author's to see, in its words
            raise ConfigError(f"The scorer {view.scorer} cannot score an entry that answered nothing against "
                              f"{where}{phase}: {exc} Fix the reference (or the scorer) and add the challenge "
                              "again.") from None
        try:
            found = own_answers_scores(view)
        except Exception as exc:  # noqa: BLE001 - as above: the author's to see
            raise ConfigError(f"The scorer {view.scorer} cannot score the answers of {where}{phase} itself, given "
                              f"as an entry's: {exc} Fix what it names and add the challenge again.") from None
        if found is not None and not math.isclose(found[1]["score"] or 0.0, found[0], rel_tol=1e-9):
            raise ConfigError(short_of_best(view, *found))


def phase_named(ch: Challenge) -> str:
    return f" (phase {ch.phase.name})" if ch.phase is not None else ""


def short_of_best(ch: Challenge, best: float, scores: dict[str, float | None]) -> str:
    """The refusal of a reference that scores below the best against itself, in one sentence: what
    came out, and which parts were 0/0 (null) and what [score] undefined made of them."""
    phase = phase_named(ch)
    shown = ", ".join(f"{name} {'null' if value is None else f'{value:.6g}'}" for name, value in scores.items())
    null = [name for name, value in scores.items() if value is None]
    undefined = ch.score_options.undefined
    why = "" if not null else (f"; {', '.join(null)} {'is' if len(null) == 1 else 'are'} null (0/0: the test set has "
                               f"nothing of that kind), which [score] undefined = \"{undefined}\" "
                               + ("counts as 0 in score" if undefined == "zero" else "leaves out of score"))
    return (f"The reference {ch.reference_dir}{phase}, given to the scorer {ch.scorer} as an entry's answers, "
            f"scores {scores['score']:.6g}, not the best {best:g}, so an entry right on every test record would not "
            f"score best ({shown}){why}: fix the reference (or [score]) and add the challenge again.")
