"""Stage: score (built with the evaluation pipeline). It runs on the host only, so reference
answers never enter a VM. This module finds the scorer a challenge names and records which
version of it ran (rescoring must be able to say what produced a number); it also holds the
few reading rules the built-in scorers share, so that they all treat REFERENCE.csv alike."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import re
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Callable, Collection, Mapping, Sequence

from vmjudge.config import ScoreOptions
from vmjudge.errors import AnswerError, ConfigError, ScoringError
from vmjudge.stages.score.base import ExamResults, Scorer

__all__ = ["BUILTINS", "ENTRY_POINT_GROUP", "ExamResults", "Scorer", "answer_check", "load_scorer",
           "reference_sha256", "scorer_version"]

BUILTINS: tuple[str, ...] = ("accuracy", "af2017", "alarms2015", "beats2014", "heart2016")
ENTRY_POINT_GROUP = "vmjudge.scorers"

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_TARGET_RE = re.compile(rf"^({_DOTTED}):({_DOTTED})$")
_FILE_RE = re.compile(rf"^(.+\.py):({_DOTTED})$")


# --- finding a scorer ---------------------------------------------------------------------

def load_scorer(spec: str, options: ScoreOptions | None = None) -> Scorer:
    """The scorer named by `spec`: a built-in name, else an entry point of group
    vmjudge.scorers, else "package.module:function", else "path/to/file.py:function" (an
    organiser's fixed scorer for `vmjudge rescore`, which need not be installed). Built-ins
    come first so that an installed package can never silently replace the official rules
    of a challenge. `options` ([score] in challenge.toml) reach built-in scorers only."""
    if spec in BUILTINS:
        return functools.partial(_builtin(spec).score, options=options or ScoreOptions())
    module, attr, _label = _module(spec)
    return _callable(spec, _attribute(spec, module, attr))


def scorer_version(spec: str, options: ScoreOptions | None = None) -> str:
    """What produced a score, for the record: "beats2014/1" for a built-in (its VERSION is
    bumped whenever a rule changes; an organiser's [score] choice other than the default is
    added, "heart2016/2 undefined=zero"), otherwise "package.module:function@<sha256[:12]>"
    (or "file.py:function@...") of the module's file, so a rescore shows whether the code
    changed in between."""
    if spec in BUILTINS:
        chosen = options or ScoreOptions()
        changed = [f"{name}={getattr(chosen, name)}" for name in ("undefined", "invalid_answers")
                   if getattr(chosen, name) != getattr(ScoreOptions(), name)]
        return " ".join([f"{spec}/{_builtin(spec).VERSION}", *changed])
    module, attr, label = _module(spec)
    return f"{label}:{attr}@{_file_digest(module)}"


def answer_check(spec: str) -> Callable[[str], str | None] | None:
    """The built-in scorer's test of one answer label (None: accepted, else why the official
    code refuses it), for the quiz to refuse such a line before the exam; None for scorers
    that accept any answer."""
    if spec not in BUILTINS:
        return None
    return getattr(_builtin(spec), "answer_problem", None)


def reference_sha256(reference: Path) -> str:
    """One hash over a reference directory (each file's relative path and sha256, in sorted
    order), recorded with every score: a corrected label gives a different hash."""
    reference = Path(reference)
    if not reference.is_dir():
        raise ScoringError(f"The reference directory {reference} does not exist: give the directory holding "
                           "the reference answers for the test set.")
    digest = hashlib.sha256()
    try:
        for path in sorted(p for p in reference.rglob("*") if p.is_file()):
            digest.update(path.relative_to(reference).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    except OSError as exc:
        raise ScoringError(f"The reference directory {reference} cannot be read ({exc}): give a directory "
                           "holding only the reference answers.") from exc
    return digest.hexdigest()


def _builtin(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def _module(spec: str) -> tuple[ModuleType, str, str]:
    """The module a non-built-in spec names (imported), the attribute to take from it, and
    how to name the module in a scorer version (its dotted name, or its file's name)."""
    if _entry_point(spec) is None:
        match = _FILE_RE.match(spec)
        if match is not None:
            path = Path(match.group(1))
            return _import_file(spec, path), match.group(2), path.name
    module_name, attr = _target(spec)
    return _import(spec, module_name), attr, module_name


def _import_file(spec: str, path: Path) -> ModuleType:
    """A scorer module loaded from its file, under a name made of its path and content hash,
    so that a file edited between two loads is loaded afresh."""
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"Scorer {spec!r} cannot be loaded: {path} cannot be read "
                          f"({exc.strerror or exc}); give the path of a Python file.") from exc
    tag = hashlib.sha256(str(path.resolve()).encode() + b"\0" + source).hexdigest()[:16]
    name = f"vmjudge_scorer_{tag}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigError(f"Scorer {spec!r} cannot be loaded: {path} is not a Python file.")
    module = importlib.util.module_from_spec(loader_spec)
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:  # the organiser must see why, whatever the file raised
        raise ConfigError(f"Scorer {spec!r} cannot be loaded: running {path} failed "
                          f"({type(exc).__name__}: {exc}).") from exc
    sys.modules[name] = module
    return module


def _target(spec: str) -> tuple[str, str]:
    """(module, attribute) for an entry point or a "module:function" spec."""
    ep = _entry_point(spec)
    if ep is not None:
        return ep.module, ep.attr
    match = _TARGET_RE.match(spec)
    if match is None:
        raise ConfigError(f"Unknown scorer {spec!r}: use a built-in ({', '.join(BUILTINS)}), the name of an "
                          f"entry point in group {ENTRY_POINT_GROUP}, \"package.module:function\" or "
                          "\"path/to/file.py:function\".")
    return match.group(1), match.group(2)


def _entry_point(name: str) -> EntryPoint | None:
    found = {ep.value: ep for ep in entry_points(group=ENTRY_POINT_GROUP, name=name)}
    if len(found) > 1:
        raise ConfigError(f"Scorer {name!r} is registered in group {ENTRY_POINT_GROUP} more than once "
                          f"({', '.join(sorted(found))}): uninstall all but one, or name it as "
                          "\"package.module:function\".")
    return next(iter(found.values()), None)


def _import(spec: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:  # the organiser must see why, whatever the module raised
        raise ConfigError(f"Scorer {spec!r} cannot be loaded: importing module {module_name!r} failed "
                          f"({type(exc).__name__}: {exc}).") from exc


def _attribute(spec: str, module: ModuleType, attr: str) -> object:
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"Scorer {spec!r} cannot be loaded: module {module.__name__!r} has no {attr!r}.")
        obj = getattr(obj, part)
    return obj


def _callable(spec: str, obj: object) -> Scorer:
    if not callable(obj):
        raise ConfigError(f"Scorer {spec!r} is not callable: it must be a function (results, reference) "
                          "returning a dict of named scores.")
    return obj  # type: ignore[return-value]


def _file_digest(module: ModuleType) -> str:
    path = getattr(module, "__file__", None)
    if not path:
        return "nofile"
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


# --- rules the built-in scorers share -----------------------------------------------------

def read_reference_csv(reference: Path, fields: tuple[Collection[str] | None, ...],
                       form: str) -> dict[str, tuple[str, ...]]:
    """REFERENCE.csv as {record: (field, ...)}: one "RECORD,FIELD..." line per record, blank
    lines and surrounding whitespace ignored. `fields` gives, for each field after RECORD,
    the values allowed (None: any non-empty text); `form` (e.g. "RECORD,LABEL with LABEL 0
    or 1") is quoted in the error, which names the file and line, so the organiser can fix
    the reference rather than get a silently wrong score."""
    path = reference / "REFERENCE.csv"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScoringError(f"The reference file {path} cannot be read ({exc.strerror or exc}).") from exc
    table: dict[str, tuple[str, ...]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        record, values = parts[0], tuple(parts[1:])
        if (not record or len(values) != len(fields)
                or any(not v or (allowed is not None and v not in allowed) for v, allowed in zip(values, fields))):
            raise ScoringError(f"{path} line {number} is {line!r}, but each line must be {form}.")
        if record in table:
            raise ScoringError(f"{path} line {number} repeats record {record!r}: give each record one line.")
        table[record] = values
    return table


def reference_rows(results: ExamResults, table: Mapping[str, tuple[str, ...]],
                   reference: Path) -> list[tuple[str, tuple[str, ...]]]:
    """The reference line of each tested record, in test order; records only in the
    reference are ignored (a challenge may keep one file for several test sets)."""
    missing = [r for r in results.records if r not in table]
    if missing:
        raise ScoringError(f"{reference / 'REFERENCE.csv'} has no line for test record {missing[0]!r}"
                           + (f" (nor for {len(missing) - 1} more)" if len(missing) > 1 else "")
                           + ": every record of the test set needs a reference answer.")
    return [(r, table[r]) for r in results.records]


def answers_of(results: ExamResults, scorer: str) -> Callable[[str], str | None]:
    """A lookup of each record's answer, stripped of surrounding whitespace (as the reference
    is); None when the record has none. Refuses results of the other style, which would
    otherwise score as all-missing."""
    if results.answers is None:
        raise ScoringError(f"The scorer {scorer} expects style answer-lines, but these results hold "
                           "output files: set [results] style = \"answer-lines\" or choose another scorer.")
    answers = results.answers

    def answer(record: str) -> str | None:
        value = answers.get(record)
        return None if value is None else value.strip()

    return answer


def ratio(numerator: float, denominator: float) -> float:
    """numerator/denominator, with 0/0 taken as 0: an empty class must not crash a score."""
    return float(numerator) / denominator if denominator else 0.0


def part(numerator: float, denominator: float) -> float | None:
    """numerator/denominator; None for 0/0, where the official code gives NaN: such a part is
    reported as null and [score] undefined decides what it does to `score`."""
    return float(numerator) / denominator if denominator else None


def mean_of_parts(values: Sequence[float | None], options: ScoreOptions) -> float:
    """The mean of a score's parts. undefined = "omit": of the defined parts only (0 when none
    is); "zero": an undefined part counts as 0."""
    if options.undefined == "zero":
        return sum(v or 0.0 for v in values) / len(values)
    defined = [v for v in values if v is not None]
    return sum(defined) / len(defined) if defined else 0.0


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
