"""[score] kind = "container": the organiser's evaluation method, a container image run in a VM as stage 4,
as Grand Challenge runs a phase's evaluation (stages/score/container.py); and [score] isolate = true: the
challenge's own scorer file run in a VM of the challenge's image (stages/score/isolated.py).

The image is given Grand Challenge's inputs (/input/predictions.json, each case's outputs at
/input/PK/output/RELATIVE_PATH, the reference directory read-only at `ground_truth`) and writes
/output/metrics.json. The score is read from it at `metric`, a JSON path of keys joined by dots
("aggregates.dice.mean"), as Grand Challenge's phase reads its score_jsonpath; `order` is which
ranks first on the boards, "higher" or "lower" (Grand Challenge's score_default_sort, descending
or ascending: a distance or an error ranks its lowest first); each [[score.column]] is a further
number shown beside the score (Grand Challenge's extra_results_columns), read at its own path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .values import Section

GROUND_TRUTH = "/opt/ml/input/data/ground_truth"  # where Grand Challenge unpacks a phase's ground truth tarball
_PATH = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){0,15}")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_ROOT_PATH = re.compile(r"(/[A-Za-z0-9_.-]+){1,16}")
PATH_ALLOWED = "keys of metrics.json joined by dots, such as \"aggregates.dice.mean\""


@dataclass(frozen=True)
class Column:
    """A further number of metrics.json shown beside the score."""

    name: str  # the scores' key it is kept under: a word such as "dsc_agg"
    path: str
    title: str


@dataclass(frozen=True)
class EvaluationRules:
    image: Path  # the organiser's saved image (docker save, or an OCI archive), in the challenge directory
    metric: str
    order: str = "higher"  # which score ranks first: "higher" or "lower"
    columns: tuple[Column, ...] = ()
    ground_truth: str = GROUND_TRUTH
    metrics_bytes: int = 1 << 20  # of metrics.json, read at most: a larger one is the evaluation's fault
    home_mib: int = 1024  # the disk its root's changes and /output are written on (a sparse file)
    max_size: int = 4 << 30  # the image's archive
    max_unpacked: int = 8 << 30  # what its layers unpack to


@dataclass(frozen=True)
class IsolatedScorer:
    """[score] isolate = true: the scorer file beside challenge.toml, and the function in it, called in
    a VM with no network rather than in the judge's process."""

    file: Path
    function: str


_ISOLATED = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_-]{0,63}\.py):([A-Za-z_][A-Za-z0-9_]{0,63})")


def isolated_scorer(source: str, directory: Path, scorer: str, isolate: bool) -> IsolatedScorer | None:
    """The scorer file `scorer` names ("scoring.py:function"), when [score] isolate is true; None else.
    A file scorer is only ever run isolated: in the judge's process, a file beside challenge.toml would
    be the organiser's code with the judge's privileges."""
    found = _ISOLATED.fullmatch(scorer)
    if not isolate:
        if found or scorer.endswith(".py"):
            raise ConfigError(f"{source}: [score] scorer = {scorer!r} is a file of the challenge directory, which "
                              "vmjudge runs only in a VM: add isolate = true to [score].")
        return None
    if found is None:
        raise ConfigError(f"{source}: [score] isolate = true runs a scorer file of the challenge directory in a VM: "
                          "give scorer = \"scoring.py:function\", the file beside challenge.toml and its function.")
    path = directory / found.group(1)
    if not path.is_file():
        raise ConfigError(f"{source}: [score] scorer = {scorer!r}: {path} is not a file; put the scorer there.")
    return IsolatedScorer(path, found.group(2))


def evaluation_rules(source: str, directory: Path, sec: Section) -> EvaluationRules:
    """The container keys of [score] (its kind already read as "container")."""
    image = sec.get("image", str, None, lambda v: not v.startswith("/") and ".." not in Path(v).parts,
                    "the path of the saved image in the challenge directory, such as \"evaluation/image.tar.gz\"")
    if image is None:
        raise ConfigError(f"{source}: [score] kind = \"container\" needs image, the organiser's evaluation image "
                          "saved in the challenge directory (docker save IMAGE | gzip -c > evaluation.tar.gz).")
    metric = sec.get("metric", str, None, lambda v: bool(_PATH.fullmatch(v)), PATH_ALLOWED)
    if metric is None:
        raise ConfigError(f"{source}: [score] kind = \"container\" needs metric, the path of the score in "
                          "metrics.json, such as \"aggregates.dice.mean\".")
    columns = tuple(_column(source, i, c) for i, c in enumerate(sec.get("column", list, [],
                                                                         allowed="[[score.column]] tables")))
    if len({c.name for c in columns} | {"score"}) != len(columns) + 1:
        raise ConfigError(f"{source}: [[score.column]] names must differ from each other and from \"score\".")
    return EvaluationRules(
        image=directory / image, metric=metric,
        order=sec.get("order", str, "higher", lambda v: v in ("higher", "lower"),
                      "\"higher\" (a higher score ranks first) or \"lower\" (a lower one does)"),
        columns=columns,
        ground_truth=sec.get("ground_truth", str, GROUND_TRUTH,
                             lambda v: bool(_ROOT_PATH.fullmatch(v)) and not v.startswith(("/input", "/output"))
                             and "/." not in v, "an absolute path outside /input and /output, such as "
                             f"\"{GROUND_TRUTH}\""),
        metrics_bytes=sec.get("metrics_bytes", int, 1 << 20, lambda v: 1024 <= v <= 1 << 30,
                              "bytes from 1024 to 1073741824"),
        home_mib=sec.get("home", int, 1024, lambda v: 64 <= v <= 1 << 22, "a whole number of MiB from 64 to 4194304"),
        max_size=sec.get("max_size", int, 4 << 30, lambda v: 1 <= v <= 1 << 40, "bytes from 1 to 1099511627776"),
        max_unpacked=sec.get("max_unpacked", int, 8 << 30, lambda v: 1 <= v <= 1 << 42,
                             "bytes from 1 to 4398046511104"))


def _column(source: str, index: int, doc: Any) -> Column:
    sec = Section(source, f"score.column {index + 1}", doc)
    name = sec.get("name", str, None, lambda v: bool(_NAME.fullmatch(v)),
                   "a lower-case word of letters, digits and _, such as \"dsc_agg\"")
    path = sec.get("path", str, None, lambda v: bool(_PATH.fullmatch(v)), PATH_ALLOWED)
    title = sec.get("title", str, name, lambda v: 0 < len(v) <= 60 and v.isprintable(), "at most 60 characters")
    sec.done()
    if name is None or path is None:
        raise ConfigError(f"{source}: [[score.column]] {index + 1} needs a name and a path.")
    return Column(name, path, title or name)
