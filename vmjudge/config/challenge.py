"""challenge.toml as frozen dataclasses, and what `challenge add` checks of the data beside it.

Every value is checked when the file is read, so a typo is refused with the file, the key,
the value and what is allowed, before any VM or image build is started.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .cpu import LEVEL_ALLOWED, LEVELS
from .entry import ContainerRules, EntryRules, container_rules, entry_rules
from .evaluation import EvaluationRules, IsolatedScorer, evaluation_rules, isolated_scorer
from .image import GPU_DRIVERS, ImageRecipe, image_recipe
from .limits import StageLimits, stage_limits
from .phase import Phase, Shared, read_phases
from .portal_page import PortalPage, check_portal_files, check_sample_kind, portal_page
from .records import read_records, record_files, socket_record_files
from .results import ResultsRule, quiz_check, results_rule
from .sockets import Sockets, check_record_inputs, read_sockets
from .submission import SubmissionRules, format_records, read_format, set_files, set_formats, submission_rules
from .values import Section, read_toml

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_INSTANCE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,63}")


# [vm] gpu: the card a stage needs; "any" is any GPU slot of the site.
GPU_MODELS = ("t4", "any")


@dataclass(frozen=True)
class VmShape:
    vcpus: int = 2
    memory_mib: int = 2048
    home_mib: int = 1024
    gpu: str | None = None  # a GPU_MODELS name: every VM stage runs in a GPU slot, with the card passed through
    # The least CPU level (config/cpu.py) its entries may be given: a host whose guests get less takes none of
    # its stages (supervisor/environment.py), so an entry built for AVX2 never meets a CPU without it.
    cpu_level: str | None = None
    # The cloud instance the VM's shape mirrors ("ml.m5.large"), named in reports beside the limits; a name only.
    instance: str | None = None


@dataclass(frozen=True)
class ScoreOptions:
    """[score]: what a built-in scorer does where the official scoring code gives no number.

    undefined: a part that is 0/0 (a class absent from the test set) is reported as null;
    "omit" leaves it out of `score` (the mean of the parts that are defined), "zero" counts
    it as 0 (vmjudge's rule before these options). invalid_answers: an answer the official
    code refuses; "refuse" (its own behaviour) fails the quiz at that line, and the entry at
    scoring, "map" reads it as the scorer's documented stand-in (e.g. unsure, noise)."""

    undefined: str = "omit"
    invalid_answers: str = "refuse"
    socket: str | None = None  # a challenge with sockets: the [[output]] whose values the scorer reads


# A challenge.toml without [score]: the default argument of the built-in scorers.
DEFAULT_SCORE_OPTIONS = ScoreOptions()


@dataclass(frozen=True)
class Challenge:
    name: str
    directory: Path
    image: ImageRecipe = field(default_factory=ImageRecipe)
    vm: VmShape = field(default_factory=VmShape)
    entry: EntryRules = field(default_factory=EntryRules)
    container: ContainerRules | None = None  # [container], for entry kind "container" only
    limits: StageLimits = field(default_factory=StageLimits)
    results: ResultsRule = field(default_factory=ResultsRule)
    scorer: str = "accuracy"
    score_options: ScoreOptions = field(default_factory=ScoreOptions)
    training: tuple[str, ...] = ()
    test: tuple[str, ...] = ()
    phases: tuple[Phase, ...] = ()  # [[phase]], in the contest's order; () for a challenge without phases
    sockets: Sockets | None = None  # [[input]] and [[output]]: a container challenge run Grand Challenge's way
    evaluation: EvaluationRules | None = None  # [score] kind = "container": the organiser's evaluation image
    isolated: IsolatedScorer | None = None  # [score] isolate = true: the scorer file, run in a VM
    submission: SubmissionRules | None = None  # [submission], for entry kind "submission" only (DrivenData's)
    # [quiz] check: what stage 2 demands of each training case: "submitted" (the entry's own results,
    # reproduced byte for byte), "outputs" (every output socket present and valid) or "none".
    quiz_check: str = "submitted"
    portal: PortalPage = field(default_factory=PortalPage)  # [portal]: the portal's page and downloads
    # The phase this copy is seen in (in_phase): its sets, reference, limits and image replace the challenge's.
    phase: Phase | None = None

    @property
    def scored_in_vm(self) -> bool:
        """Whether stage 4 runs in a VM (an evaluation image, or an isolated scorer) rather than on the host."""
        return self.evaluation is not None or self.isolated is not None

    @property
    def lower_first(self) -> bool:
        """Whether a lower score ranks first on the boards (an evaluation's [score] order = "lower")."""
        return self.evaluation is not None and self.evaluation.order == "lower"

    @property
    def reference_dir(self) -> Path:
        return self.phase.reference_dir if self.phase is not None else self.directory / "reference"

    @property
    def secret_dirs(self) -> tuple[Path, ...]:
        """Every test set and reference, the challenge's and each phase's: what never leaves the judge."""
        return (self.directory / "test", self.directory / "reference",
                *(d for p in self.phases for d in (p.test_dir, p.reference_dir)))

    def set_dir(self, subset: str) -> Path:
        """Where a record set's RECORDS and files are: training/, test/, or the phase's own sets."""
        if self.phase is not None:
            return self.phase.test_dir if subset == "test" else self.phase.training_dir
        return self.directory / subset

    @property
    def recipes(self) -> tuple[ImageRecipe, ...]:
        """The images its entries run in, each once, in the phases' order: every phase's (a phase
        may have its own), or the challenge's when it has no phases. What `challenge add` and
        `image build` build, and every host sharing the queue must hold."""
        found = [p.image for p in self.phases] or [self.image]
        return tuple(dict.fromkeys(found))

    def record_files(self, subset: str, record: str) -> list[Path]:
        """The files of one record: RECORD.* (linked beside next.sh), or with sockets every file
        under RECORD/ (laid out as the case's /input)."""
        if self.sockets is not None:
            return socket_record_files(self.set_dir(subset), record)
        return record_files(self.set_dir(subset), record)

    def phase_named(self, name: str) -> Phase:
        for phase in self.phases:
            if phase.name == name:
                return phase
        if not self.phases:
            raise ConfigError(f"challenge {self.name} has no phases, so there is no phase {name!r}: leave out "
                              "--phase.")
        raise ConfigError(f"challenge {self.name} has no phase {name!r}: its phases are "
                          f"{', '.join(p.name for p in self.phases)}.")

    def in_phase(self, name: str | None) -> Challenge:
        """The challenge as an entry of phase `name` is judged: the phase's training and test
        sets, reference, limits, scored-entry limit and image (None: the challenge itself)."""
        if name is None:
            return self
        phase = self.phase_named(name)
        return replace(self, phase=phase, training=phase.training, test=phase.test, limits=phase.limits,
                       image=phase.image, entry=replace(self.entry, max_scored_per_owner=phase.max_scored_per_owner))

    def shared_view(self, name: str | None, what: str) -> Challenge:
        """`in_phase(name)`; without a name, the challenge itself, which stands for every phase
        only while no phase has a training set or an image of its own: otherwise the organiser
        is asked, in one sentence, which phase `what` (e.g. "the replica") is for."""
        if name is not None:
            return self.in_phase(name)
        training = (self.directory / "training").resolve()
        own = [p.name for p in self.phases if p.training_dir.resolve() != training or p.image != self.image]
        if own:
            which = f"phase {own[0]} has" if len(own) == 1 else f"phases {', '.join(own)} have"
            raise ConfigError(f"{which} a training set or an image of {'its' if len(own) == 1 else 'their'} own, "
                              f"so {what} of {self.name} differs by phase: name the phase with --phase "
                              f"({', '.join(p.name for p in self.phases)}).")
        return self

    def before(self, phase: Phase) -> Phase | None:
        """The phase before `phase` in the contest (the board owners are promoted from)."""
        return self.phases[phase.position - 1] if phase.position > 0 else None


def load_challenge(directory: Path) -> Challenge:
    directory = Path(directory).resolve()
    source = str(directory / "challenge.toml")
    data = read_toml(directory / "challenge.toml")
    top = Section(source, "top level", {k: v for k, v in data.items()
                                        if not isinstance(v, dict) and k not in ("phase", "input", "output")})
    name = top.get("name", str, None, lambda v: bool(_NAME_RE.fullmatch(v)),
                   "letters, digits, '.', '_' and '-', at most 64 characters")
    if name is None:
        raise ConfigError(f"{source} has no name: add a line such as name = \"beats2014\".")
    top.done()
    recipe = image_recipe(source, directory, "image", data.get("image", {}))
    vm = Section(source, "vm", data.get("vm", {}))
    shape = VmShape(
        vcpus=vm.get("vcpus", int, 2, lambda v: 1 <= v <= 64, "a whole number from 1 to 64"),
        memory_mib=vm.get("memory", int, 2048, lambda v: 256 <= v <= 1 << 20,
                          "a whole number of MiB from 256 to 1048576"),
        home_mib=vm.get("home", int, 1024, lambda v: 64 <= v <= 1 << 22, "a whole number of MiB from 64 to 4194304"),
        gpu=vm.get("gpu", str, None, lambda v: v in GPU_MODELS, " or ".join(f'"{m}"' for m in GPU_MODELS)),
        cpu_level=vm.get("cpu_level", str, None, lambda v: v in LEVELS, LEVEL_ALLOWED),
        instance=vm.get("instance", str, None, lambda v: bool(_INSTANCE_RE.fullmatch(v)),
                        "letters, digits, '.' and '-', at most 64 characters, such as \"ml.m5.large\""))
    vm.done()
    entry = entry_rules(source, data)
    sockets = read_sockets(source, data, entry.kind)
    container = container_rules(source, data, entry.kind)
    if sockets is not None and container is not None and container.run != "per_case":
        raise ConfigError(f"{source}: a challenge with sockets runs the image once per case, as Grand Challenge does: "
                          "remove [container] run.")
    submission = submission_rules(source, data, entry.kind)
    scorer, score_options, evaluation, isolated = _scorer(source, directory, data, sockets)
    limits = stage_limits(source, "limits", data.get("limits", {}))
    phases = read_phases(source, directory, data, Shared(limits, entry, directory / "training", recipe))
    if submission is not None and phases:
        raise ConfigError(f"{source}: a challenge of submission entries has no phases yet: remove [[phase]].")
    sets = (lambda d: format_records(d, submission)) if submission is not None else read_records
    for table, image in [("image", recipe)] + [(f"phase {p.name}.image", p.image) for p in phases]:
        if shape.gpu is not None and image.gpu is None:
            raise ConfigError(f"{source}: [vm] gpu = {shape.gpu!r} needs a guest driver in the image: add "
                              f"gpu = \"{GPU_DRIVERS[0]}\" to [{table}].")
    page = portal_page(source, directory, data)
    ch = Challenge(name=name, directory=directory, image=recipe, vm=shape, entry=entry,
                     container=container, limits=limits, results=results_rule(source, data, entry.kind, sockets),
                     scorer=scorer, score_options=score_options,
                     training=sets(directory / "training"), test=sets(directory / "test"),
                     phases=phases, sockets=sockets, quiz_check=quiz_check(source, data, sockets, entry.kind),
                     evaluation=evaluation, isolated=isolated, submission=submission, portal=page)
    check_sample_kind(source, page, entry.kind)
    return ch


def _scorer(source: str, directory: Path, data: dict[str, Any], sockets: Sockets | None = None
            ) -> tuple[str, ScoreOptions, EvaluationRules | None, IsolatedScorer | None]:
    sec = Section(source, "score", data.get("score", {}))
    if sec.get("kind", str, "host", lambda v: v in ("host", "container"),
               "\"host\" (a scorer in vmjudge's process) or \"container\" (the organiser's evaluation image)") \
            == "container":
        if sockets is None:
            raise ConfigError(f"{source}: [score] kind = \"container\" reads the entries' outputs by socket: "
                              "declare them with [[input]] and [[output]].")
        evaluation = evaluation_rules(source, directory, sec)
        sec.done()
        return "container", ScoreOptions(socket=sockets.outputs[0].slug), evaluation, None
    scorer = sec.get("scorer", str, "accuracy", lambda v: bool(re.fullmatch(r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_]+)?", v)),
                     "a built-in scorer name such as \"beats2014\", \"package.module:function\", or with "
                     "isolate = true \"scoring.py:function\"")
    isolated = isolated_scorer(source, directory, scorer, sec.get("isolate", bool, False, allowed="true or false"))
    options = ScoreOptions(
        undefined=sec.get("undefined", str, ScoreOptions.undefined, lambda v: v in ("omit", "zero"),
                          "\"omit\" (leave a 0/0 part out of score) or \"zero\" (count it as 0)"),
        invalid_answers=sec.get("invalid_answers", str, ScoreOptions.invalid_answers,
                                lambda v: v in ("refuse", "map"),
                                "\"refuse\" (as the official code: the quiz fails at that line) or \"map\" "
                                "(the scorer's documented stand-in)"),
        socket=sec.get("socket", str, None, lambda v: sockets is not None and v in {s.slug for s in sockets.outputs},
                       "the slug of one of the challenge's [[output]] sockets"))
    sec.done()
    if sockets is not None and options.socket is None:
        if len(sockets.outputs) > 1:
            raise ConfigError(f"{source}: [score] socket must name the [[output]] the scorer reads: one of "
                              f"{', '.join(s.slug for s in sockets.outputs)}.")
        options = replace(options, socket=sockets.outputs[0].slug)
    return scorer, options, None, isolated


def check_challenge_data(ch: Challenge) -> None:
    """What `challenge add` insists on beyond the toml: both sets present (with phases, each
    phase's training and test sets), every record with files, no reference answer among the
    test records' files, and no test record in a training set participants are given then."""
    views = [ch.in_phase(p.name) for p in ch.phases] or [ch]
    for view in views:
        _check_set(view, "training", view.training)
        _check_set(view, "test", view.test)
        if not view.reference_dir.is_dir():
            raise ConfigError(f"{view.reference_dir} is missing: put the reference answers for the test set there.")
        _check_no_answers_in_test(view)
    for i, view in enumerate(views):
        for later in views[i:]:
            _check_no_test_in_training(view, later)
    check_portal_files(str(ch.directory / "challenge.toml"), ch.directory, ch.portal, ch.secret_dirs)


def _shown(ch: Challenge, subset: str) -> str:
    """A set as the organiser names it: its RECORDS file in the challenge, and its phase."""
    where = f"{ch.set_dir(subset).relative_to(ch.directory)}/RECORDS"
    return f"phase {ch.phase.name}'s {subset} set ({where})" if ch.phase is not None else where


def _check_no_test_in_training(ch: Challenge, later: Challenge) -> None:
    """A phase's training set is given to every participant from the phase on (the quiz runs on
    it, the replica carries it), so no record of its test set, or of a later phase's, may be
    in it. An earlier phase's test records may: a contest releases them as it goes on."""
    both = sorted(set(ch.training) & set(later.test))
    if both:
        named = f"record {both[0]} is" if len(both) == 1 else f"records {both[0]} and {len(both) - 1} more are"
        raise ConfigError(f"{named} in {_shown(ch, 'training')} and in {_shown(later, 'test')}: "
                          "a training set goes to every participant, so its records are not hidden; remove "
                          f"{'it' if len(both) == 1 else 'them'} from one of the two RECORDS files.")


def _check_set(ch: Challenge, subset: str, records: tuple[str, ...]) -> None:
    where = ch.set_dir(subset)
    # A directory the phase names (not training/ or test/ at the top): said as the phase's.
    if ch.phase is not None and where.resolve() != (ch.directory / subset).resolve() and not where.is_dir():
        raise ConfigError(f"{where} is missing: put phase {ch.phase.name}'s {subset} set there (its RECORDS and "
                          f"each record's files), or correct [phase {ch.phase.name}] {subset} in challenge.toml.")
    if ch.submission is not None:  # the set is its directory; its records, its format's ids (each step's)
        for fmt in set_formats(where, ch.submission):
            read_format(fmt)
        return
    if not records:
        raise ConfigError(f"{where / 'RECORDS'} is missing or empty: list one record per line.")
    shown = where.relative_to(ch.directory)
    for record in records:
        if ch.sockets is not None:
            check_record_inputs(ch.sockets, where, record, str(shown))
        elif not ch.record_files(subset, record):
            raise ConfigError(f"record {record} in {shown}/RECORDS has no files {shown}/{record}.*: "
                              "add them or remove the record.")


def _check_no_answers_in_test(ch: Challenge) -> None:
    """Every file of a test record rides on the exam's CD into the VM, where the entry can read
    it; a file named like one under reference/ (PhysioNet's test/100.atr beside reference/100.atr)
    is most likely the answer itself."""
    answers = {p.name for p in ch.reference_dir.rglob("*") if p.is_file()}
    shown = ch.set_dir("test").relative_to(ch.directory)
    files = set_files(ch.set_dir("test")).values() if ch.submission is not None else \
        (f for record in ch.test for f in ch.record_files("test", record))
    clashes = sorted(f"{shown}/{f.relative_to(ch.set_dir('test'))}" for f in files if f.name in answers)
    if clashes:
        shown_clashes = ", ".join(clashes[:5]) + (f" and {len(clashes) - 5} more" if len(clashes) > 5 else "")
        raise ConfigError(f"{shown_clashes} {'has' if len(clashes) == 1 else 'have'} the name of a reference answer "
                          f"under {ch.reference_dir}, and test records' files go into the VM, where entries can read "
                          f"them: keep the answers under {ch.reference_dir.relative_to(ch.directory)}/ only, remove "
                          f"them from {shown}/, and add the challenge again.")
