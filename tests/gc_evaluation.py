"""HECKTOR 2025 Task 1's evaluation method from Grand Challenge's own evaluation template, without Docker (#56):
the forge (grand-challenge-forge 0.7.5) renders `example-evaluation-method` for the phase's sockets, and its
Dockerfile is built step by step as tests/gc_template.py builds the algorithm's (`FROM python:3.11-slim` on the
judge's Debian layer; stand-ins for SimpleITK, numpy and psutil where `pip install --user` puts them), then saved
as its do_save.sh saves it.

The organiser's edit, the one change made to the rendered files: the handler's ground-truth lines and bogus
metric become Dice against the phase's ground truth (REFERENCE-CASE.mha, at /opt/ml/input/data/ground_truth as
Grand Challenge unpacks a ground truth tarball), computed as vmjudge's built-in `dice` does (a voxel other than 0
is foreground; both empty is undefined and left out of the mean); the case is found from its CT's image name
through a map the organiser bakes into the image's resources/ (the template's "Option 1"); and the aggregate is
the mean Dice. Nothing in it is written for vmjudge.

Usage: python -m tests.gc_evaluation ROOT_SQFS OUT_DIR   (ROOT_SQFS: HOME/images/KEY/root.sqfs)
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

from .gc_template import INPUTS, OUTPUTS, Build, saved_name
from .segment_images import debian_layer

HECKTOR = Path(__file__).resolve().parent.parent / "examples" / "hecktor2025" / "task1"
PHASE_SLUG = "sanity-check-task-1"
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
AGGREGATE = ('"dice": mean(r["dice"] for r in metrics["results"] if r["dice"] is not None),\n'
             '            "DSCagg": 2 * sum(r["overlap"] for r in metrics["results"])\n'
             '            / (sum(r["volumes"] for r in metrics["results"]) or 1)')


def render(out: Path) -> Path:
    """The forge's example-evaluation-method for Task 1's phase, rendered by the forge itself into `out`."""
    from grand_challenge_forge.forge import generate_example_evaluation

    inputs, outputs = ([{"slug": s, "kind": k, "super_kind": sk, "relative_path": p, "example_value": None}
                        for s, k, sk, p in rows] for rows in (INPUTS, OUTPUTS))
    context = {"phase": {"slug": PHASE_SLUG, "algorithm_interfaces": [{"inputs": inputs, "outputs": outputs}],
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


def organiser_edit(evaluate: str) -> str:
    """The rendered evaluate.py with its handler's ground truth and metric replaced by Dice (see above)."""
    assert evaluate.count(EDIT_FROM) == evaluate.count(EDIT_TO) == evaluate.count(AGGREGATE_FROM) == 1, \
        "the template's handler has changed"
    edited = evaluate[:evaluate.index(EDIT_FROM)] + DICE + evaluate[evaluate.index(EDIT_TO) + len(EDIT_TO):]
    return edited.replace(AGGREGATE_FROM, AGGREGATE)


def case_map() -> dict[str, str]:
    """Each CT's image name (its file's name in the case's directory) to its case, for every set of Task 1."""
    cts = [*HECKTOR.glob("training/*/images/ct/*.mha"), *HECKTOR.glob("phases/*/test/*/images/ct/*.mha")]
    return {ct.name: ct.parents[2].name for ct in sorted(cts)}


def evaluation_image(root_sqfs: Path, out: Path, first: str = "") -> Path:
    """The organiser's evaluation image, saved as do_save.sh saves it, in `out`; `first`: lines its main()
    runs first (a hostile variant's)."""
    work = out / "gc-evaluation-layers"
    work.mkdir(parents=True, exist_ok=True)
    context = render(work / "rendered")
    edited = organiser_edit((context / "evaluate.py").read_text())
    assert edited.count("\ndef main():\n") == 1, "the template's main() has changed"
    (context / "evaluate.py").write_text(edited.replace("\ndef main():\n", "\ndef main():\n" + first))
    (context / "resources" / "cases.json").write_text(json.dumps(case_map(), indent=1))
    created = "2025-08-20T09:00:00.000000000Z"
    tag, filename = saved_name((context / "do_save.sh").read_text(), created)
    base = debian_layer(root_sqfs, work, keep=("multiprocessing",))  # helpers.py's process pool and manager
    out.mkdir(parents=True, exist_ok=True)
    saved = Build(context, base, work).save(out / filename, tag, created)
    shutil.rmtree(work)
    return saved


if __name__ == "__main__":
    print(evaluation_image(Path(sys.argv[1]), Path(sys.argv[2])))
