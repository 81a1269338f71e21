"""Finding the scorer a challenge names, and recording which version of it ran (rescoring must
be able to say what produced a number).

The entry points of group vmjudge.scorers are the one registry, as CMS does for its score
types: the built-ins are found there like any other package's scorer (setup.cfg registers
them), and what makes one built-in is where its code lives, vmjudge.scorers.builtin. A
built-in is a module: score(results, reference, options), which takes the challenge's [score]
options, its VERSION and, if the official code refuses some answers, answer_problem. Another
scorer is any callable (results, reference), versioned by the hash of its file."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType

from vmjudge.config import ScoreOptions
from vmjudge.errors import ConfigError
from vmjudge.files import sha256_file
from vmjudge.scorers.base import Scorer

ENTRY_POINT_GROUP = "vmjudge.scorers"
BUILTIN_PACKAGE = "vmjudge.scorers.builtin"

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_TARGET_RE = re.compile(rf"^({_DOTTED}):({_DOTTED})$")
_FILE_RE = re.compile(rf"^(.+\.py):({_DOTTED})$")


def load_scorer(spec: str, options: ScoreOptions | None = None) -> Scorer:
    """The scorer named by `spec`: a built-in name, else an entry point of group
    vmjudge.scorers, else "package.module:function", else "path/to/file.py:function" (an
    organiser's fixed scorer for `vmjudge rescore`, which need not be installed). Built-ins
    come first so that an installed package can never silently replace the official rules
    of a challenge. `options` ([score] in challenge.toml) reach built-in scorers only."""
    builtin = _builtin(spec)
    if builtin is not None:
        return functools.partial(builtin.score, options=options or ScoreOptions())
    module, attr, _label = _module(spec)
    return _callable(spec, _attribute(spec, module, attr))


def compile_scorer(path: Path) -> None:
    """A scorer file's Python checked without running it ([score] isolate = true: the judge runs it in a
    VM only); ConfigError naming the line at fault."""
    try:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ConfigError(f"The scorer file {path} is not valid Python: line {exc.lineno}: {exc.msg}.") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"The scorer file {path} cannot be read as Python ({exc}).") from None


def scorer_version(spec: str, options: ScoreOptions | None = None) -> str:
    """What produced a score, for the record: "beats2014/1" for a built-in (its VERSION is
    bumped whenever a rule changes; an organiser's [score] choice other than the default is
    added, "heart2016/2 undefined=zero"), otherwise "package.module:function@<sha256[:12]>"
    (or "file.py:function@...") of the module's file, so a rescore shows whether the code
    changed in between."""
    builtin = _builtin(spec)
    if builtin is not None:
        chosen = options or ScoreOptions()
        changed = [f"{name}={getattr(chosen, name)}" for name in ("undefined", "invalid_answers")
                   if getattr(chosen, name) != getattr(ScoreOptions(), name)]
        return " ".join([f"{spec}/{builtin.VERSION}", *changed])
    module, attr, label = _module(spec)
    return f"{label}:{attr}@{_file_digest(module)}"


def answer_check(spec: str) -> Callable[[str], str | None] | None:
    """The built-in scorer's test of one answer label (None: accepted, else why the official
    code refuses it), for the quiz to refuse such a line before the exam; None for scorers
    that accept any answer."""
    builtin = _builtin(spec)
    if builtin is None:
        return None
    return getattr(builtin, "answer_problem", None)


def builtin_names() -> tuple[str, ...]:
    """The built-in scorers' names, in order, as the registry holds them."""
    return tuple(sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if _is_builtin(ep)}))


def _is_builtin(ep: EntryPoint) -> bool:
    return ep.module.startswith(f"{BUILTIN_PACKAGE}.")


def _builtin(name: str) -> ModuleType | None:
    """The built-in scorer's module when `name` is one, whatever else is registered under it."""
    ep = next((ep for ep in entry_points(group=ENTRY_POINT_GROUP, name=name) if _is_builtin(ep)), None)
    return None if ep is None else importlib.import_module(ep.module)


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
        raise ConfigError(f"Unknown scorer {spec!r}: use a built-in ({', '.join(builtin_names())}), the name of "
                          f"an entry point in group {ENTRY_POINT_GROUP}, \"package.module:function\" or "
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
    return obj


def _file_digest(module: ModuleType) -> str:
    path = getattr(module, "__file__", None)
    if not path:
        return "nofile"
    return sha256_file(Path(path))[:12]
