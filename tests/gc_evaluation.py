"""HECKTOR 2025's evaluation methods from Grand Challenge's own evaluation template, without Docker (#56): the
forge (grand-challenge-forge 0.7.5) renders `example-evaluation-method` for a phase's sockets, and its Dockerfile
is built step by step as tests/gc_template.py builds the algorithm's (`FROM python:3.11-slim` on the judge's
Debian layer; stand-ins for SimpleITK, numpy and psutil where `pip install --user` puts them), then saved as its
do_save.sh saves it.

The organiser's edit, the one change made to the rendered files: each handler's ground-truth lines and bogus
metric become the task's own, and the aggregate the task's score. The case is found from its CT's image name
through a map the organiser bakes into the image's resources/ (the template's "Option 1"); the ground truth is the
phase's reference/, at /opt/ml/input/data/ground_truth as Grand Challenge unpacks a ground truth tarball
("Option 2"). Nothing in it is written for vmjudge.

- Task 1: Dice against REFERENCE-CASE.mha, computed as vmjudge's built-in `dice` does (a voxel other than 0 is
  foreground; both empty is undefined and left out of the mean); the aggregate is the mean Dice.
- Task 2: each case's risk (rfs.json) kept; the aggregate is Harrell's C against survival.csv, counted as
  lifelines' concordance_index(times, -risks, events) counts it, as HECKTOR's evaluation does. Task 2's phase
  has two interfaces (with and without the planning CT and dose), so the forge renders two handlers.

Usage: python -m tests.gc_evaluation ROOT_SQFS OUT_DIR [2]   (ROOT_SQFS: HOME/images/KEY/root.sqfs)
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .gc_template import INPUTS, OUTPUTS, Build, saved_name
from .segment_images import debian_layer

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "hecktor2025"
HECKTOR = EXAMPLE / "task1"
EDIT_FROM, EDIT_TO = "    # Fourthly, load your ground truth\n", '        "my_metric": random.choice([1, 0]),\n    }\n'
DICE = '''    # Fourthly, the ground truth of the case: its id from the CT's name (our map in resources/), its
    # label image from the ground truth tarball
    with open(Path("/opt/app/resources") / "cases.json") as f:
        case = json.load(f)[image_name_ct_image]
    ground_truth_dir = Path("/opt/ml/input/data/ground_truth")
    truth = SimpleITK.GetArrayFromImage(SimpleITK.ReadImage(str(ground_truth_dir / f"REFERENCE-{case}.mha")))

    # Dice of the foreground (tumour and lymph nodes together); both empty is undefined
    predicted = [v != 0 for v in result_tumor_lymph_node_segmentation.flat]
    expected = [v != 0 for v in truth.flat]
    if len(predicted) != len(expected):
        return {"case": case, "dice": 0.0, "overlap": 0, "volumes": len(predicted)}
    overlap = sum(1 for p, t in zip(predicted, expected) if p and t)
    volumes = sum(predicted) + sum(expected)
    print(report)
    return {"case": case, "dice": 2 * overlap / volumes if volumes else None, "overlap": overlap, "volumes": volumes}
'''
AGGREGATE_FROM = '"my_metric": mean(result["my_metric"] for result in metrics["results"])'
DICE_AGGREGATE = ('"dice": mean(r["dice"] for r in metrics["results"] if r["dice"] is not None),\n'
             '            "DSCagg": 2 * sum(r["overlap"] for r in metrics["results"])\n'
             '            / (sum(r["volumes"] for r in metrics["results"]) or 1)')


RISK = '''    # Fourthly, the case: its id from the CT's name (our map in resources/)
    with open(Path("/opt/app/resources") / "cases.json") as f:
        case = json.load(f)[image_name_ct_image]
    print(report)
    return {"case": case, "risk": float(result_recurrence_free_survival)}
'''
C_INDEX = '''def c_index(results):
    # Harrell's C of the risks against the ground truth's survival.csv (record,time,event), pairs counted as
    # lifelines' concordance_index(times, -risks, events) counts them
    with open(Path("/opt/ml/input/data/ground_truth") / "survival.csv") as f:
        truth = {row["record"]: (float(row["time"]), int(row["event"])) for row in csv.DictReader(f)}
    risks = [(truth[r["case"]], r["risk"]) for r in results]
    pairs = concordant = 0.0
    for (t_i, e_i), r_i in risks:
        for (t_j, e_j), r_j in risks:
            if e_i and (t_i < t_j or (t_i == t_j and not e_j)):
                pairs += 1
                concordant += 1.0 if r_i > r_j else 0.5 if r_i == r_j else 0.0
    return concordant / pairs if pairs else None


'''
TASK2_INPUTS = (*INPUTS, ("ct-planning-image", "Image", "Image", "images/ct-planning"),
                ("rt-dose", "Image", "Image", "images/rt-dose"))


@dataclass(frozen=True)
class Task:
    """A HECKTOR task's phase as the forge is told it, and the organiser's edit of what it renders."""

    directory: Path
    phase_slug: str
    interfaces: tuple[tuple[tuple[str, str, str, str], ...], ...]  # each the inputs of one algorithm interface
    outputs: tuple[tuple[str, str, str, str], ...]
    handler: str  # each handler's lines from its ground truth on
    aggregate: str
    functions: str = ""  # the organiser's, before print_inputs()
    imports: str = ""


TASK1 = Task(HECKTOR, "sanity-check-task-1", (INPUTS,), OUTPUTS, DICE, DICE_AGGREGATE)
TASK2 = Task(EXAMPLE / "task2", "sanity-check-task-2", (TASK2_INPUTS, INPUTS),
             (("recurrence-free-survival", "Float", "Value", "rfs.json"),), RISK,
             '"c_index": c_index(metrics["results"])', C_INDEX, "import csv\n")


def render(out: Path, task: Task = TASK1) -> Path:
    """The forge's example-evaluation-method for the task's phase, rendered by the forge itself into `out`."""
    from grand_challenge_forge.forge import generate_example_evaluation

    def sockets(rows: tuple[tuple[str, str, str, str], ...]) -> list[dict]:
        return [{"slug": s, "kind": k, "super_kind": sk, "relative_path": p, "example_value": None}
                for s, k, sk, p in rows]
    interfaces = [{"inputs": sockets(inputs), "outputs": sockets(task.outputs)} for inputs in task.interfaces]
    context = {"phase": {"slug": task.phase_slug, "algorithm_interfaces": interfaces,
                         "evaluation_additional_inputs": [], "evaluation_additional_outputs": []}}
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zip_file:
        generate_example_evaluation(output_zip_file=zip_file, target_zpath=Path("example-evaluation-method"),
                                    context=context)
    with zipfile.ZipFile(archive) as zip_file:
        for info in zip_file.infolist():
            if "__pycache__" in info.filename:
                continue
            (out / info.filename).parent.mkdir(parents=True, exist_ok=True)
            (out / info.filename).write_bytes(zip_file.read(info))
            os.chmod(out / info.filename, info.external_attr >> 16 & 0o777)
    return out / "example-evaluation-method"


def organiser_edit(evaluate: str, task: Task = TASK1) -> str:
    """The rendered evaluate.py with each handler's ground truth and metric, and the aggregate, the task's."""
    handlers = len(task.interfaces)
    assert evaluate.count(EDIT_FROM) == evaluate.count(EDIT_TO) == handlers, "the template's handlers have changed"
    assert evaluate.count(AGGREGATE_FROM) == evaluate.count("\ndef print_inputs():") == 1, "its main() has changed"
    for _ in range(handlers):
        start, end = evaluate.index(EDIT_FROM), evaluate.index(EDIT_TO) + len(EDIT_TO)
        evaluate = evaluate[:start] + task.handler + evaluate[end:]
    evaluate = evaluate.replace(AGGREGATE_FROM, task.aggregate)
    evaluate = evaluate.replace("\nimport json\n", f"\n{task.imports}import json\n", 1)
    return evaluate.replace("\ndef print_inputs():", f"\n{task.functions}def print_inputs():")


def case_map(task: Task = TASK1) -> dict[str, str]:
    """Each CT's image name (its file's name in the case's directory) to its case, for every set of the task."""
    cts = [*task.directory.glob("training/*/images/ct/*.mha"), *task.directory.glob("phases/*/test/*/images/ct/*.mha")]
    return {ct.name: ct.parents[2].name for ct in sorted(cts)}


def evaluation_image(root_sqfs: Path, out: Path, first: str = "", task: Task = TASK1) -> Path:
    """The organiser's evaluation image for `task`, saved as do_save.sh saves it, in `out`; `first`: lines its
    main() runs first (a hostile variant's)."""
    work = out / "gc-evaluation-layers"
    work.mkdir(parents=True, exist_ok=True)
    context = render(work / "rendered", task)
    edited = organiser_edit((context / "evaluate.py").read_text(), task)
    assert edited.count("\ndef main():\n") == 1, "the template's main() has changed"
    (context / "evaluate.py").write_text(edited.replace("\ndef main():\n", "\ndef main():\n" + first))
    (context / "resources" / "cases.json").write_text(json.dumps(case_map(task), indent=1))
    created = "2025-08-20T09:00:00.000000000Z"
    tag, filename = saved_name((context / "do_save.sh").read_text(), created)
    base = debian_layer(root_sqfs, work, keep=("multiprocessing",))  # helpers.py's process pool and manager
    out.mkdir(parents=True, exist_ok=True)
    saved = Build(context, base, work).save(out / filename, tag, created)
    shutil.rmtree(work)
    return saved


if __name__ == "__main__":
    print(evaluation_image(Path(sys.argv[1]), Path(sys.argv[2]), task=TASK2 if sys.argv[3:] == ["2"] else TASK1))
