"""examples/hecktor2025 on the host (no VM): its data reproducible, both tasks loading with their
sockets and phases, every record laid out as a Grand Challenge case's /input, and the synthetic
data such that a sensible model scores as one would hope (a PET threshold's Dice, a lesion
volume's C-index over 0.5)."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from vmjudge.config import check_challenge_data, load_challenge
from vmjudge.config.sockets import check_record_inputs
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.loader import load_scorer
from vmjudge.scorers.mha import geometry, read_mha, write_mha

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hecktor2025"
TASKS = ("task1", "task2")
GENERATED = ("training", "phases")
PHASES = {"sanity": 3, "validation": 4, "test": 5}
EHR_KEYS = ["Age", "Gender", "Tobacco Consumption", "Alcohol Consumption", "Performance Status", "Treatment",
            "M-stage"]
PLANNING = {"HN-001", "HN-003", "HN-102", "HN-201", "HN-204", "HN-302", "HN-303"}


def sets(task: str) -> list[tuple[Path, Path, list[str]]]:
    """(set directory, reference directory, records) for the training set and each phase's test set."""
    top = EXAMPLE / task
    found = [(top / "training", top / "training")]
    found += [(top / "phases" / p / "test", top / "phases" / p / "reference") for p in PHASES]
    return [(d, ref, (d / "RECORDS").read_text().split()) for d, ref in found]


def image(record_dir: Path, socket_dir: str) -> Path:
    files = list((record_dir / socket_dir).iterdir())
    assert len(files) == 1 and files[0].suffix == ".mha", files
    return files[0]


def normalised(path: Path) -> bytes:
    """A file's bytes, a compressed .mha's as its header without CompressedDataSize and its voxels
    inflated: what generate.py promises whatever zlib compresses them."""
    data = path.read_bytes()
    if path.suffix != ".mha":
        return data
    head, sep, body = data.partition(b"ElementDataFile = LOCAL\n")
    lines = [line for line in head.split(b"\n") if not line.startswith(b"CompressedDataSize")]
    return b"\n".join(lines) + sep + (zlib.decompress(body) if b"CompressedData = True" in head else body)


def test_generate_reproduces_the_committed_files(tmp_path):
    copy = tmp_path / "hecktor2025"
    shutil.copytree(EXAMPLE, copy)
    for task in TASKS:
        for sub in GENERATED:
            shutil.rmtree(copy / task / sub)
    done = subprocess.run([sys.executable, "-B", str(copy / "generate.py"), "--out", str(copy)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    committed = {p.relative_to(EXAMPLE): normalised(p) for p in EXAMPLE.rglob("*") if p.is_file()}
    generated = {p.relative_to(copy): normalised(p) for p in copy.rglob("*") if p.is_file()}
    assert sorted(generated) == sorted(committed)
    for rel, data in committed.items():
        assert generated[rel] == data, rel


def test_layout_and_sizes():
    for name in ("generate.py", "README.md", "task1/challenge.toml", "task2/challenge.toml"):
        assert (EXAMPLE / name).is_file()
    assert sum(p.stat().st_size for p in EXAMPLE.rglob("*") if p.is_file()) < 400_000
    for path in EXAMPLE.rglob("*"):
        assert not path.is_symlink(), path  # a record's links are not its files
        assert not (path.is_file() and path.stat().st_mode & 0o111), path


@pytest.mark.parametrize("task", TASKS)
def test_the_challenge_loads_with_its_sockets_and_phases(task):
    ch = load_challenge(EXAMPLE / task)
    check_challenge_data(ch)
    assert ch.entry.kind == "container" and ch.quiz_check == "outputs" and ch.results.style == "sockets"
    assert ch.sockets is not None
    inputs = [(s.slug, s.kind, s.relative_path, s.required) for s in ch.sockets.inputs]
    shared = [("ct-image", "image", "images/ct", True), ("pet-image", "image", "images/pet", True),
              ("electronic-health-record", "anything", "ehr.json", True)]
    outputs = [(s.slug, s.kind, s.relative_path, s.like) for s in ch.sockets.outputs]
    if task == "task1":
        assert inputs == shared
        assert outputs == [("tumor-lymph-node-segmentation", "segmentation", "images/tumor-lymph-node-segmentation",
                            "ct-image")]
        assert (ch.scorer, ch.score_options.socket) == ("dice", "tumor-lymph-node-segmentation")
    else:
        assert inputs == shared + [("ct-planning-image", "image", "images/ct-planning", False),
                                   ("rt-dose", "image", "images/rt-dose", False)]
        assert outputs == [("recurrence-free-survival", "float", "rfs.json", None)]
        assert (ch.scorer, ch.score_options.socket) == ("cindex", "recurrence-free-survival")
    assert [(p.name, len(p.test), p.carry, p.entrants, p.feedback, p.board) for p in ch.phases] == [
        ("sanity", 3, None, "all", "full", "public"), ("validation", 4, "sanity", "all", "full", "public"),
        ("test", 5, "validation", "promoted", "errors", "hidden")]
    assert ch.phases[2].max_submitted_per_owner == 1 and ch.phases[1].max_working_per_owner == 2
    for phase in ch.phases:
        view = ch.in_phase(phase.name)
        assert view.training == ("HN-001", "HN-002", "HN-003")
        assert view.reference_dir == EXAMPLE / task / "phases" / phase.name / "reference"
        for subset in ("training", "test"):
            for record in getattr(view, subset):
                check_record_inputs(ch.sockets, view.set_dir(subset), record, subset)
                top = view.set_dir(subset) / record
                names = sorted(f.relative_to(top).parent.as_posix() for f in view.record_files(subset, record))
                extra = ["images/ct-planning", "images/rt-dose"] if task == "task2" and record in PLANNING else []
                assert names == sorted([".", "images/ct", "images/pet"] + extra), (record, names)


@pytest.mark.parametrize("task", TASKS)
def test_records_are_grand_challenge_cases(task):
    """One image of a uuid's name per socket, CT int16 and PET float32 on one grid, ehr.json with
    HECKTOR's keys; references beside the training set and in each phase's reference/ only."""
    for directory, reference, records in sets(task):
        assert sorted(p.name for p in directory.iterdir()) == sorted(
            records + ["RECORDS"] + ([] if directory != reference else
                                     [f"REFERENCE-{r}.mha" for r in records] if task == "task1" else
                                     ["survival.csv"]))
        if directory != reference:
            assert sorted(p.name for p in reference.iterdir()) == (
                sorted(f"REFERENCE-{r}.mha" for r in records) if task == "task1" else ["survival.csv"])
        for record in records:
            ct, pet = image(directory / record, "images/ct"), image(directory / record, "images/pet")
            assert len(ct.stem) == 36 and ct.stem.count("-") == 4 and ct.stem != pet.stem
            assert read_mha(ct.read_bytes()).element == "MET_SHORT"
            assert read_mha(pet.read_bytes()).element == "MET_FLOAT"
            grid = geometry(ct.read_bytes())
            assert grid == geometry(pet.read_bytes()) and grid[:2] == ((20.0, 20.0, 12.0), (4.0, 4.0, 3.0))
            ehr = json.loads((directory / record / "ehr.json").read_text())
            assert list(ehr) == (["CenterID"] if task == "task2" else []) + EHR_KEYS
            assert ehr["M-stage"] in ("M0", "M1", "Mx")
            if task == "task1":
                mask = (reference / f"REFERENCE-{record}.mha").read_bytes()
                assert geometry(mask) == grid and read_mha(mask).element == "MET_UCHAR"
                assert set(read_mha(mask).values()) in ({0, 1}, {0, 1, 2})
            else:  # the same patients, the same image files, as Task 1's
                twin = EXAMPLE / "task1" / directory.relative_to(EXAMPLE / "task2") / record
                assert image(twin, "images/ct").read_bytes() == ct.read_bytes()
                assert image(twin, "images/pet").read_bytes() == pet.read_bytes()
                if record in PLANNING:
                    assert read_mha(image(directory / record, "images/rt-dose").read_bytes()).element == "MET_FLOAT"
                    assert geometry(image(directory / record, "images/ct-planning").read_bytes())[0] == grid[0]


def pet_threshold(record_dir: Path) -> tuple[bytes, int]:
    """The mask of PET over SUV 2.5 (a classic baseline), as a MetaImage, and its voxel count."""
    pet = read_mha(image(record_dir, "images/pet").read_bytes())
    mask = bytes(1 if v >= 2.5 else 0 for v in pet.values())
    return write_mha(pet.shape, "MET_UCHAR", mask), sum(mask)


def test_dice_of_a_pet_threshold():
    scorer = load_scorer("dice")
    for directory, reference, records in sets("task1"):
        answers = {r: pet_threshold(directory / r)[0] for r in records}
        got = scorer(ExamResults(records=tuple(records), files=answers), reference)
        assert 0.6 < got["score"] < 0.95 and got["failed"] == 0, (directory, got)
        truth = {r: (reference / f"REFERENCE-{r}.mha").read_bytes() for r in records}
        assert scorer(ExamResults(records=tuple(records), files=truth), reference)["score"] == 1.0


def harrell(rows: list[tuple[int, int]], risks: list[float]) -> float:
    """Harrell's C: of the pairs where the shorter time is a recurrence, the share the risks order."""
    good = pairs = 0.0
    for i, j in itertools.permutations(range(len(rows)), 2):
        if rows[i][1] and rows[i][0] < rows[j][0]:
            pairs += 1
            good += 1 if risks[i] > risks[j] else 0.5 if risks[i] == risks[j] else 0
    return good / pairs


def test_survival_follows_the_lesions():
    for directory, reference, records in sets("task2"):
        lines = (reference / "survival.csv").read_text().splitlines()
        assert lines[0] == "record,time,event" and [line.split(",")[0] for line in lines[1:]] == records
        rows = [(int(t), int(e)) for _, t, e in (line.split(",") for line in lines[1:])]
        assert all(0 < t < 4000 for t, _ in rows) and {e for _, e in rows} == {0, 1}
        risks = [pet_threshold(directory / r)[1] for r in records]  # the metabolic tumour volume
        assert harrell(rows, risks) > 0.5, directory
