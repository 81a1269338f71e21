"""An entry's answers as the built-in scorers read them: stripped like the reference, refused
when the results are of the other style, and those the official code would refuse dealt with
as the challenge's [score] invalid_answers says."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from vmjudge.config import ScoreOptions
from vmjudge.errors import AnswerError, ScoringError
from vmjudge.queue.results import ExamResults


def files_of(results: ExamResults, scorer: str, options: ScoreOptions, what: str) -> Mapping[str, bytes | None]:
    """Each record's file, for a scorer of files (`what`: what each holds, for the refusal): its
    output file, or with sockets the value it left for the [score] socket. Answer lines are
    refused, as they would otherwise score as all-missing."""
    if results.outputs is not None:
        if options.socket is None:
            raise ScoringError(f"The scorer {scorer} was given socket results but no socket to read: set [score] "
                               f"socket to the slug of the [[output]] that holds {what}.")
        slug = options.socket
        return {record: outputs.get(slug) for record, outputs in results.outputs.items()}
    if results.files is None:
        raise ScoringError(f"The scorer {scorer} expects {what}, one per record (sockets, or style files), but these "
                           "results hold answer lines: set [results] style = \"files\" or choose another scorer.")
    return results.files


def answers_of(results: ExamResults, scorer: str) -> Callable[[str], str | None]:
    """A lookup of each record's answer, stripped of surrounding whitespace (as the reference
    is); None when the record has none. A submission's rows (style "table") answer too when they
    hold one column beside the id, its value the answer: any scorer of labels then scores a
    submission challenge. Refuses results of the other style, which would otherwise score as
    all-missing."""
    if results.rows is not None:
        return _row_answers(results.rows, scorer)
    if results.answers is None:
        raise ScoringError(f"The scorer {scorer} expects style answer-lines, but these results hold "
                           "output files: set [results] style = \"answer-lines\" or choose another scorer.")
    answers = results.answers

    def answer(record: str) -> str | None:
        value = answers.get(record)
        return None if value is None else value.strip()

    return answer


def _row_answers(rows: Mapping[str, Mapping[str, str] | None], scorer: str) -> Callable[[str], str | None]:
    wide = next((row for row in rows.values() if row is not None and len(row) != 1), None)
    if wide is not None:
        raise ScoringError(f"The scorer {scorer} reads one label per id, but the submission format has "
                           f"{len(wide)} columns beside its id ({', '.join(list(wide)[:5])}): keep one, or choose a "
                           "scorer of tables.")

    def answer(record: str) -> str | None:
        row = rows.get(record)
        return None if row is None else next(iter(row.values())).strip()

    return answer


def checked_answers(results: ExamResults, scorer: str, options: ScoreOptions,
                    problem: Callable[[str], str | None], stand_in: str) -> Callable[[str], str | None]:
    """answers_of (an empty answer being no answer), with every answer the official code
    would refuse dealt with as [score] invalid_answers says: "refuse" raises AnswerError
    naming how many test records have one (the official script refuses the whole answer
    file, so there is no score); "map" reads it as `stand_in`."""
    given = answers_of(results, scorer)
    answers = {r: given(r) or None for r in results.records}  # an empty answer is no answer
    bad = [(r, label, why) for r, label in answers.items() if label is not None and (why := problem(label))]
    if bad and options.invalid_answers == "refuse":
        record, label, why = bad[0]
        raise AnswerError(f"{len(bad)} test record(s) have an answer the official {scorer} scorer refuses; the "
                          "official script gives no score for such an answer file, so this entry is not scored: "
                          "make next.sh write only the allowed answers (stage 2 checks the training answers the "
                          "same way).", detail=f"the first: {record},{label} ({why})")
    answers.update({r: stand_in for r, _, _ in bad})
    return answers.get
