"""The example challenges under examples/: reproducible, well formed, and with sample entries
that behave as their case says. Host only (no VM): entries are run the way the judge runs
them (entry files copied into a home directory, each record's files linked in, next.sh run
there), with the host's python3 and numpy, and for alarms2015 the sigstat its image builds, built
with the host's make from the same source (tests/sigstat_build.py)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.loader import load_scorer
from vmjudge.stages.answers import parse_answer_lines

from .sigstat_build import build_sigstat

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GENERATED = ("training", "test", "reference", "entries")
CASES = ("good", "missing-file", "setup-error", "quiz-mismatch", "quiz-timeout", "dryrun", "exam-errors",
         "exam-over-cap")


class Example:
    def __init__(self, name: str, style: str, required: tuple[str, ...], mismatch: str, hang: str,
                 failing: tuple[str, ...], builds_tools: bool = False):
        self.name, self.style, self.required = name, style, required
        self.mismatch, self.hang, self.failing = mismatch, hang, failing
        self.builds_tools = builds_tools  # its image builds programs (image/) that its entries call
        self.dir = EXAMPLES / name

    def records(self, subset: str) -> list[str]:
        return (self.dir / subset / "RECORDS").read_text().split()

    def __repr__(self) -> str:
        return self.name


BEATS = Example("beats2014", "files", ("setup.sh", "next.sh", "AUTHORS.txt"), mismatch="102", hang="101",
                failing=("201", "204"))
AF = Example("af2017", "answer-lines", ("setup.sh", "next.sh", "answers.txt", "AUTHORS.txt", "LICENSE.txt"),
             mismatch="A0003", hang="A0002", failing=("B0002", "B0005"))
ALARMS = Example("alarms2015", "answer-lines", ("setup.sh", "next.sh", "answers.txt", "AUTHORS.txt", "LICENSE.txt"),
                 mismatch="b103l", hang="a102l", failing=("a202l", "b203l"), builds_tools=True)
ALL = [BEATS, AF, ALARMS]
# alarms2015: a record's first letter -> its alarm type, as in the 2015 records' names
ALARM_TYPES = {"a": "Asystole", "b": "Bradycardia", "t": "Tachycardia", "v": "Ventricular_Tachycardia",
               "f": "Ventricular_Flutter_Fib"}


def tree(root: Path, subs: tuple[str, ...] = GENERATED) -> dict[str, tuple[bytes, bool]]:
    """Relative path -> (bytes, executable) for every file under `subs` (the generated directories)."""
    out = {}
    for sub in subs:
        for path in sorted((root / sub).rglob("*")):
            assert not path.is_symlink(), path
            if path.is_file():
                out[str(path.relative_to(root))] = (path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR))
    return out


# ------------------------------------------------------------------ running entries like the judge

@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> Path:
    """The bin directory of what alarms2015's image builds (sigstat), built once on the host."""
    return build_sigstat(tmp_path_factory.mktemp("sigstat"))


def host_env(example: Example, tmp_path: Path, tools: Path, fake_sleep: bool = False) -> dict[str, str]:
    """python3 = this interpreter's venv (numpy); first, for a challenge whose image builds
    programs, those programs; optionally a `sleep` that only logs its argument."""
    path = [str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]
    if example.builds_tools:
        path.insert(0, str(tools))
    env = dict(os.environ)
    if fake_sleep:
        fake = tmp_path / "fakebin"
        fake.mkdir(exist_ok=True)
        (fake / "sleep").write_text('#!/bin/sh\necho "$*" >> "$SLEEP_LOG"\n')
        os.chmod(fake / "sleep", 0o755)
        path.insert(0, str(fake))
        env["SLEEP_LOG"] = str(tmp_path / "sleep.log")
    env["PATH"] = os.pathsep.join(path)
    return env


def script(home: Path, name: str, *args: str) -> list[str]:
    """As the judge: ./name if it has an execute bit, else bash name."""
    return [f"./{name}", *args] if os.access(home / name, os.X_OK) else ["bash", name, *args]


class Home:
    """An entry installed as the judge installs it: its files in a fresh home directory, the
    submitted answers.txt set aside (answer-lines style)."""

    def __init__(self, example: Example, entry: Path, tmp_path: Path, env: dict[str, str]):
        self.example, self.env = example, env
        self.path = tmp_path / "home"
        shutil.copytree(entry, self.path, symlinks=True)
        if example.style == "answer-lines":
            (self.path / "answers.txt").unlink()

    def run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), cwd=self.path, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=120)

    def next(self, subset: str, record: str) -> tuple[subprocess.CompletedProcess, bytes | None]:
        """Runs next.sh RECORD with the record's files linked in; returns its result and its
        answer (the output file's bytes, or the lines it appended to answers.txt)."""
        source = self.example.dir / subset
        links = [self.path / f.name for f in sorted(source.glob(f"{record}.*"))]
        for link in links:
            link.symlink_to(source / link.name)
        answers = self.path / "answers.txt"
        before = answers.read_bytes() if answers.exists() else b""
        try:
            done = self.run(*script(self.path, "next.sh", record))
        finally:
            for link in links:
                link.unlink()
        if self.example.style == "files":
            out = self.path / f"{record}.qrs"
            return done, out.read_bytes() if out.exists() else None
        after = answers.read_bytes() if answers.exists() else b""
        assert after.startswith(before)
        return done, after[len(before):] or None


def submitted(example: Example, entry: Path) -> dict[str, bytes]:
    """The entry's own answers for each training record."""
    records = example.records("training")
    if example.style == "files":
        return {r: (entry / "outputs" / f"{r}.qrs").read_bytes() for r in records}
    lines = (entry / "answers.txt").read_bytes().splitlines(keepends=True)
    assert [line.split(b",")[0].decode() for line in lines] == records
    return dict(zip(records, lines, strict=True))


def quiz(example: Example, case: str, tmp_path: Path, tools: Path, skip: tuple[str, ...] = ()) -> list[str]:
    """Stage 2 on the host: the training records whose answer differs from the submitted one."""
    entry = example.dir / "entries" / case
    home = Home(example, entry, tmp_path, host_env(example, tmp_path, tools))
    assert home.run(*script(home.path, "setup.sh")).returncode == 0
    expected = submitted(example, entry)
    differ = []
    for r in example.records("training"):
        if r in skip:
            continue
        done, answer = home.next("training", r)
        assert done.returncode == 0, (r, done.stdout)
        if answer != expected[r]:
            differ.append(r)
    return differ


# ------------------------------------------------------------------ the challenge directories

@pytest.mark.parametrize("example", ALL, ids=repr)
def test_generate_reproduces_committed_files(example, tmp_path):
    copy = tmp_path / example.name
    shutil.copytree(example.dir, copy)
    done = subprocess.run([sys.executable, str(copy / "generate.py"), "--out", str(copy)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert done.returncode == 0, done.stdout.decode()
    committed, generated = tree(example.dir), tree(copy)
    assert sorted(generated) == sorted(committed)
    for rel in committed:
        assert generated[rel] == committed[rel], rel
    # Nothing else is written: no build output next to image/'s sources, no __pycache__.
    everything = {p.relative_to(copy).as_posix() for p in copy.rglob("*")}
    assert everything == {p.relative_to(example.dir).as_posix() for p in example.dir.rglob("*")}
    assert tree(copy, ("image",)) == tree(example.dir, ("image",))


@pytest.mark.parametrize("example", ALL, ids=repr)
def test_layout_and_sizes(example):
    for name in ("challenge.toml", "generate.py", "README.md"):
        assert (example.dir / name).is_file()
    assert 10 <= len((example.dir / "README.md").read_text().splitlines()) <= 20
    size = sum(p.stat().st_size for p in example.dir.rglob("*") if p.is_file())
    assert size < 600_000, size
    for path in example.dir.rglob("*"):
        if path.is_file() and not path.name.endswith(".sh"):
            assert not path.stat().st_mode & 0o111, path


@pytest.mark.parametrize("subset", ["training", "test"])
@pytest.mark.parametrize("example", ALL, ids=repr)
def test_records_list_exactly_the_record_files(example, subset):
    directory = example.dir / subset
    records = example.records(subset)
    assert len(records) == len(set(records)) > 0
    extra = {"RECORDS", "REFERENCE.csv"}
    stems = {p.name.split(".")[0] for p in directory.iterdir() if p.name not in extra}
    assert stems == set(records)
    for r in records:
        header = (directory / f"{r}.hea").read_text().split("\n")
        assert header[0].split()[0] == r
        signal_file = header[1].split()[0]
        assert signal_file == f"{r}.dat" and (directory / signal_file).is_file()
        assert header[1].split()[1] == "16"
        n_sig = int(header[0].split()[1])
        assert header[-1] == "" and all(line.split()[:2] == [signal_file, "16"] for line in header[1:1 + n_sig])
        comments = header[1 + n_sig:-1]
        if example is ALARMS:  # the alarm type, as the first and only comment; the label is nowhere
            assert comments == [f"#{ALARM_TYPES[r[0]]}"]
        else:
            assert comments == []
        assert len(header[0].split()) == 4 and "#" not in "".join(header[:1 + n_sig])  # no dates or times


def test_beats2014_answers_only_where_allowed():
    ex = BEATS
    assert not list((ex.dir / "test").glob("*.atr"))
    assert sorted(p.suffix for p in (ex.dir / "test").iterdir()) == sorted(
        [".dat", ".hea"] * len(ex.records("test")) + [""])
    assert sorted(p.name for p in (ex.dir / "reference").iterdir()) == sorted(f"{r}.atr" for r in ex.records("test"))
    assert {p.name for p in (ex.dir / "training").glob("*.atr")} == {f"{r}.atr" for r in ex.records("training")}


@pytest.mark.parametrize("ex", [AF, ALARMS], ids=repr)
def test_answer_line_test_labels_never_in_vm_directories(ex):
    """Every label in both sets; the test set's only under reference/, which never enters a VM."""
    labels = {"af2017": {"N", "A", "O", "~"}, "alarms2015": {"0", "1"}}[ex.name]
    reference = (ex.dir / "reference" / "REFERENCE.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in reference] == ex.records("test")
    assert {line.split(",")[1] for line in reference} == labels
    training = (ex.dir / "training" / "REFERENCE.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in training] == ex.records("training")
    assert {line.split(",")[1] for line in training} == labels
    assert not (ex.dir / "test" / "REFERENCE.csv").exists()
    assert [p.name for p in (ex.dir / "reference").iterdir()] == ["REFERENCE.csv"]
    for sub in ("training", "test"):
        for path in (ex.dir / sub).iterdir():
            data = path.read_bytes()
            for r in ex.records("test"):
                assert f"{r},".encode() not in data, (path, r)
            if path.suffix == ".hea":
                assert not {b"true", b"false", b"label"} & set(data.lower().split()), path


def test_alarms2015_has_every_alarm_type_both_ways_in_training():
    """Training: each type as a true and as a false alarm; test: several types, both labels."""
    def kinds(subset: str, reference: Path) -> set[tuple[str, str]]:
        labels = dict(line.split(",") for line in reference.read_text().splitlines())
        return {((ALARMS.dir / subset / f"{r}.hea").read_text().split("\n#")[1].strip(), labels[r])
                for r in ALARMS.records(subset)}

    assert kinds("training", ALARMS.dir / "training" / "REFERENCE.csv") == {(a, b) for a in ALARM_TYPES.values()
                                                                             for b in "01"}
    test = kinds("test", ALARMS.dir / "reference" / "REFERENCE.csv")
    assert {a for a, _ in test} == set(ALARM_TYPES.values()) and {b for _, b in test} == {"0", "1"}


def test_alarms2015_image_builds_sigstat_from_its_own_source():
    """[image]: the packages to compile with and build.sh, a POSIX sh script that copies
    image/sigstat out of the read-only build directory and installs it with make (the
    image build itself, in a VM test: tests/test_pipeline.py)."""
    recipe = load_challenge(ALARMS.dir).image
    assert (recipe.packages, recipe.build, recipe.build_dir) == (("gcc", "libc6-dev", "make"), "image/build.sh",
                                                                ALARMS.dir / "image")
    script = ALARMS.dir / "image" / "build.sh"
    assert script.read_text().startswith("#!/bin/sh\n") and os.access(script, os.X_OK)
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    assert sorted(p.name for p in (ALARMS.dir / "image" / "sigstat").iterdir()) == ["Makefile", "sigstat.c"]


def test_no_build_output_under_examples():
    """The examples hold sources only: what generate.py or a host test builds stays elsewhere."""
    for path in EXAMPLES.rglob("*"):
        assert path.name != "__pycache__" and path.suffix not in (".o", ".pyc"), path
        if path.is_file():
            assert not path.read_bytes().startswith(b"\x7fELF"), path


# ------------------------------------------------------------------ the sample entries

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("example", ALL, ids=repr)
def test_entry_has_the_files_its_case_needs(example, case):
    entry = example.dir / "entries" / case
    names = {p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file()}
    required = set(example.required) - ({"next.sh"} if case == "missing-file" else set())
    assert required <= names
    assert ("next.sh" in names) == (case != "missing-file")
    assert ("DRYRUN" in names) == (case == "dryrun")
    if case == "dryrun":
        assert (entry / "DRYRUN").read_bytes() == b""
    for name in names:
        path = entry / name
        mode = stat.S_IMODE(path.stat().st_mode)
        if name.endswith(".sh"):
            text = path.read_bytes()
            assert text.startswith(b"#!/bin/sh\n") and b"\r" not in text, name
            assert mode == 0o755, (name, oct(mode))
            assert subprocess.run(["sh", "-n", str(path)], capture_output=True).returncode == 0, name
        elif name.endswith(".pl"):
            done = subprocess.run(["perl", "-c", str(path)], capture_output=True, text=True)
            assert done.returncode == 0 and done.stderr.endswith("syntax OK\n"), (name, done.stderr)
        else:
            assert mode == 0o644, (name, oct(mode))
    submitted(example, entry)  # answers for every training record, in RECORDS order


@pytest.mark.parametrize("example", ALL, ids=repr)
def test_good_entry_reproduces_its_submitted_outputs(example, tmp_path, tools):
    assert quiz(example, "good", tmp_path, tools) == []


@pytest.mark.parametrize("example", ALL, ids=repr)
def test_quiz_mismatch_entry_differs_on_one_record(example, tmp_path, tools):
    assert quiz(example, "quiz-mismatch", tmp_path, tools) == [example.mismatch]


@pytest.mark.parametrize("case", ["dryrun", "exam-errors", "exam-over-cap"])
@pytest.mark.parametrize("example", ALL, ids=repr)
def test_entries_failing_after_the_quiz_pass_it(example, case, tmp_path, tools):
    assert quiz(example, case, tmp_path, tools) == []


@pytest.mark.parametrize("example", ALL, ids=repr)
def test_setup_error_entry_fails_setup(example, tmp_path, tools):
    home = Home(example, example.dir / "entries" / "setup-error", tmp_path, host_env(example, tmp_path, tools))
    done = home.run(*script(home.path, "setup.sh"))
    assert done.returncode == 1 and done.stdout == b"cannot build\n"


@pytest.mark.parametrize("example", ALL, ids=repr)
def test_quiz_timeout_entry_hangs_on_one_training_record(example, tmp_path, tools):
    env = host_env(example, tmp_path, tools, fake_sleep=True)
    home = Home(example, example.dir / "entries" / "quiz-timeout", tmp_path, env)
    expected = submitted(example, example.dir / "entries" / "quiz-timeout")
    for r in example.records("training"):
        done, answer = home.next("training", r)
        assert done.returncode == 0 and answer == expected[r]
    assert (tmp_path / "sleep.log").read_text() == "1000\n"  # once, for the hanging record
    assert example.hang in (home.path / "next.sh").read_text()


@pytest.mark.parametrize("example", ALL, ids=repr)
def test_exam_entries_on_test_records(example, tmp_path, tools):
    """exam-errors fails (exit 3, secret output) on its two records only; exam-over-cap sleeps
    14 s on every test record and never on a training one (sleep is faked here)."""
    env = host_env(example, tmp_path, tools, fake_sleep=True)
    (tmp_path / "errors").mkdir()
    errors = Home(example, example.dir / "entries" / "exam-errors", tmp_path / "errors", env)
    for r in example.records("test"):
        done, answer = errors.next("test", r)
        if r in example.failing:
            assert done.returncode == 3 and done.stdout == f"SECRET-TEST-OUTPUT {r}\n".encode() and answer is None
        else:
            assert done.returncode == 0 and answer is not None
    assert not (tmp_path / "sleep.log").exists()
    (tmp_path / "cap").mkdir()
    slow = Home(example, example.dir / "entries" / "exam-over-cap", tmp_path / "cap", env)
    slow.next("training", example.records("training")[0])
    assert not (tmp_path / "sleep.log").exists()
    for r in example.records("test")[:2]:
        done, answer = slow.next("test", r)
        assert done.returncode == 0 and answer is not None
    assert (tmp_path / "sleep.log").read_text() == "14\n14\n"
    # 14 s a record: the whole test set needs more than the 60 s exam cap, the first 4 records fit.
    cap = load_challenge(example.dir).limits.exam_total
    assert cap == 60 and 14 * 4 < cap < 14 * len(example.records("test"))


# tests/test_pipeline.py pins these: the scores the VM run must give the two scored entries.
ALARMS_SCORES = {"good": {"TP": 4, "TN": 6, "FP": 0, "FN": 0, "score": 1.0},
                 # a202l (a true alarm) and b203l (a false one) fail: no answer suppresses the alarm
                 "exam-errors": {"TP": 3, "TN": 6, "FP": 0, "FN": 1, "score": 9 / 14}}


@pytest.mark.parametrize("case", sorted(ALARMS_SCORES))
def test_alarms2015_scores_of_the_scored_entries(case, tmp_path, tools):
    home = Home(ALARMS, ALARMS.dir / "entries" / case, tmp_path, host_env(ALARMS, tmp_path, tools))
    answers: dict[str, str | None] = {}
    for r in ALARMS.records("test"):
        done, answer = home.next("test", r)
        answers[r] = parse_answer_lines(answer).get(r) if done.returncode == 0 else None
    assert [r for r, a in answers.items() if a is None] == ([] if case == "good" else list(ALARMS.failing))
    results = ExamResults(records=tuple(ALARMS.records("test")), answers=answers)
    assert load_scorer("alarms2015")(results, ALARMS.dir / "reference") == pytest.approx(ALARMS_SCORES[case])
