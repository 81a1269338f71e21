"""tests/gc_template.py on the host (no VM): the template is the forge's own as rendered, the stand-in
SimpleITK writes what the real one and vmjudge's MetaImage reader read (and reads what the real one writes),
each sample's inference.py does what it is for when run against an /input and /output of its own, and the
sample images are what the Dockerfile builds, as admission and the root's making see them, run in their root."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from vmjudge.scorers.mha import read_mha

from . import gc_template as gc
from .needs import cannot_run, root_making_tools

SIZE, SPACING, ORIGIN = (9, 7, 5), (0.9765625, 0.9765625, 3.0), (-250.0, -240.5, -100.0)  # the CT's and PET's grid
TAG = f"example-algorithm-{gc.PHASE_SLUG}"


def pet_array() -> np.ndarray:
    pet = np.ones(SIZE[::-1], dtype=np.float32)
    pet[1:3, 2:5, 3:6] = 10.0
    pet[2, 3, 4] = 20.0
    return pet


def expected_mask() -> np.ndarray:
    return (pet_array() > 0.4 * 20.0).astype(np.uint8)


def write_image(array: np.ndarray, path: Path, compress: bool = False) -> None:
    image = sitk.GetImageFromArray(array)
    image.SetSpacing(SPACING)
    image.SetOrigin(ORIGIN)
    path.parent.mkdir(parents=True, exist_ok=True)
    sitk.WriteImage(image, str(path), useCompression=compress)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return gc.render(tmp_path_factory.mktemp("rendered"))


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> Path:
    """A case laid out as the judge gives it at /input, its images written by the real SimpleITK."""
    given = tmp_path_factory.mktemp("input")
    os.chmod(given, 0o755)  # pytest's are 0700: copied as /input, the entry's user could not read it
    ct = (np.arange(int(np.prod(SIZE))).reshape(SIZE[::-1]) % 400 - 200).astype(np.int16)
    write_image(ct, given / "images/ct/1b4e28ba-2fa1-11d2-883f-0016d3cca427.mha")
    write_image(pet_array(), given / "images/pet/6fa459ea-ee8a-3ca4-894e-db77e160355e.mha", compress=True)
    ehr = {"CenterID": 1, "Gender": 1, "Age": 61, "Tobacco Consumption": None, "HPV Status": 1}
    (given / "ehr.json").write_text(json.dumps(ehr))
    sockets = [{"interface": {"slug": slug, "kind": kind, "super_kind": super_kind, "relative_path": path},
                "image": {"name": f"{slug}.mha"} if kind == "Image" else None,
                "value": ehr if kind == "Anything" else None, "file": None}
               for slug, kind, super_kind, path in gc.INPUTS]
    (given / "inputs.json").write_text(json.dumps(sockets))
    return given


def with_stand_ins(tmp_path: Path, script: str, *args: str) -> str:
    """What `script` prints when it imports the stand-ins (a process of its own: the tests have real numpy)."""
    for name, source in gc.STAND_INS.items():
        (tmp_path / "stand-ins" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "stand-ins" / name / "__init__.py").write_text(source)
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "stand-ins")})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_template_is_the_forges_own(template):
    import grand_challenge_forge
    assert importlib.metadata.version("grand-challenge-forge") == gc.FORGE
    partial = Path(grand_challenge_forge.__file__).parent / "partials/example-algorithm"
    for name in ("Dockerfile", "resources/some_resource.txt"):
        assert (template / name).read_bytes() == (partial / name).read_bytes(), name
    assert (template / "requirements.txt").read_text().split() == ["SimpleITK", "numpy"]
    inference = (template / "inference.py").read_text()
    assert '("ct-image", "electronic-health-record", "pet-image"): interf0_handler' in inference
    for slug, _, _, path in gc.INPUTS:
        assert f'input_{slug.replace("-", "_")} = load_' in inference and f'INPUT_PATH / "{path}"' in inference
    assert 'location=OUTPUT_PATH / "images/tumor-lymph-node-segmentation"' in inference
    # The file name do_save.sh gives: its own sed lines, run by bash, against saved_name's.
    do_save = (template / "do_save.sh").read_text()
    sed = next(line for line in do_save.splitlines() if line.startswith("formatted_build_info="))
    created = "2025-08-15T12:34:56.123456789Z"
    said = subprocess.run(["bash", "-c", f'build_timestamp={created}\n{sed}\necho "$formatted_build_info"'],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert said == "2025-08-15_12-34-56"
    assert gc.saved_name(do_save, created) == (TAG, f"{TAG}_{said}.tar.gz")


@pytest.mark.parametrize("name", sorted(gc.SAMPLES))
def test_each_sample_edits_only_the_model_lines(template, name):
    rendered = (template / "inference.py").read_text()
    edited = gc.participant_edit(rendered, gc.SAMPLES[name])
    compile(edited, f"{name}/inference.py", "exec")
    head, tail = rendered[:rendered.index(gc.EDIT_FROM)], rendered[rendered.index(gc.EDIT_TO):]
    assert edited.startswith(head) and edited.endswith(tail)
    replaced = rendered[len(head):-len(tail)]
    assert "/opt/ml/model" in replaced and "numpy.eye(4, 2)" in replaced and "/opt/ml/model" not in edited
    assert "_show_torch_cuda_info()" in head and 'Path("/opt/app/resources")' in head


def test_the_stand_in_writes_what_read_mha_and_simpleitk_read(tmp_path, case):
    ct = next((case / "images/ct").glob("*.mha"))
    with_stand_ins(tmp_path, """if True:
        import sys, SimpleITK, numpy
        ct = SimpleITK.ReadImage(sys.argv[1])
        pet = numpy.asarray(SimpleITK.GetArrayFromImage(SimpleITK.ReadImage(sys.argv[2])))
        mask = SimpleITK.GetImageFromArray((pet > 8.0).astype(numpy.uint8))
        mask.CopyInformation(ct)
        SimpleITK.WriteImage(mask, sys.argv[3], useCompression=True)""",
                   str(ct), str(next((case / "images/pet").glob("*.mha"))), str(tmp_path / "mask.mha"))
    data = (tmp_path / "mask.mha").read_bytes()
    assert b"\nCompressedData = True\n" in data
    volume = read_mha(data, SIZE)
    assert volume.element == "MET_UCHAR" and volume.data == expected_mask().tobytes()
    real = sitk.ReadImage(str(tmp_path / "mask.mha"))
    assert (real.GetSize(), real.GetSpacing(), real.GetOrigin()) == (SIZE, SPACING, ORIGIN)
    assert np.array_equal(sitk.GetArrayFromImage(real), expected_mask())
    # Its header is the real one's, line for line but the size of the compressed voxels.
    write_image(expected_mask(), tmp_path / "real.mha", compress=True)
    def head(b: bytes) -> list[bytes]:
        return [x for x in b[:b.index(b"ElementDataFile")].split(b"\n") if not x.startswith(b"CompressedDataSize")]
    assert head(data) == head((tmp_path / "real.mha").read_bytes())


def test_the_stand_in_reads_what_simpleitk_writes(tmp_path, case):
    for dtype in (np.uint8, np.int16, np.float32, np.float64):
        write_image((pet_array() * 3).astype(dtype), tmp_path / f"{np.dtype(dtype).name}.mha", compress=True)
    said = json.loads(with_stand_ins(tmp_path, """if True:
        import json, sys, SimpleITK
        images = [SimpleITK.ReadImage(path) for path in sys.argv[1:]]
        print(json.dumps([[i.GetSize(), i.GetSpacing(), i.GetOrigin(), list(i.values)] for i in images]))""",
                                     *sorted(str(p) for p in tmp_path.glob("*.mha"))))
    for (size, spacing, origin, values), path in zip(said, sorted(tmp_path.glob("*.mha")), strict=True):
        assert (tuple(size), tuple(spacing), tuple(origin)) == (SIZE, SPACING, ORIGIN), path.name
        assert values == sitk.GetArrayFromImage(sitk.ReadImage(str(path))).ravel().tolist(), path.name


def run_in_own_root(tmp_path: Path, template: Path, case: Path, inference: str, timeout: float = 60,
                    memory: int | None = None) -> tuple[subprocess.CompletedProcess[str] | None, Path]:
    """`inference` run as inference.py is in the image (in /opt/app, as uid 999, its /input the case), by
    the host's python3 with the stand-ins, in a root of its own: /usr read-only from the host. None: its
    `timeout` passed; `memory`: the address space it may take."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        cannot_run("running a sample in a root of its own needs root and unshare")
    root = tmp_path / "root"
    shutil.copytree(case, root / "input")
    shutil.copytree(template / "resources", root / "opt/app/resources")
    shutil.copytree(template / "model", root / "opt/ml/model")  # what Grand Challenge extracts the model to
    (root / "opt/app/inference.py").write_text(inference)
    for name, source in gc.STAND_INS.items():
        (root / "stand-ins" / name).mkdir(parents=True)
        (root / "stand-ins" / name / "__init__.py").write_text(source)
    for d in ("usr", "output", "tmp"):
        (root / d).mkdir(mode=0o777)
        os.chmod(root / d, 0o1777 if d == "tmp" else 0o777)
    for link in ("bin", "lib", "lib64"):
        (root / link).symlink_to(f"usr/{link}")
    run = ("cd /opt/app && exec env -i PATH=/usr/bin:/bin HOME=/tmp PYTHONPATH=/stand-ins PYTHONUNBUFFERED=1 "
           "python3 inference.py")
    limit = (lambda: resource.setrlimit(resource.RLIMIT_AS, (memory, memory))) if memory else None
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount --rbind -o ro /usr '
                               '"$1/usr" && exec chroot --userspec=999:999 "$1" /bin/sh -c "$2"', "sh", str(root), run],
                              capture_output=True, text=True, timeout=timeout, preexec_fn=limit), root / "output"
    except subprocess.TimeoutExpired:
        return None, root / "output"


def masks(output: Path) -> list[str]:
    return sorted(p.relative_to(output).as_posix() for p in output.rglob("*") if p.is_file())


def check_mask(path: Path) -> None:
    """The mask the good model makes, in the CT's grid, as the real SimpleITK and vmjudge read it."""
    image = sitk.ReadImage(str(path))
    assert (image.GetSize(), image.GetSpacing(), image.GetOrigin()) == (SIZE, SPACING, ORIGIN)
    assert np.array_equal(sitk.GetArrayFromImage(image), expected_mask())
    assert read_mha(path.read_bytes(), SIZE).data == expected_mask().tobytes()


def test_the_template_as_published_runs_on_the_stand_ins(tmp_path, template, case):
    done, output = run_in_own_root(tmp_path, template, case, (template / "inference.py").read_text())
    assert done is not None and done.returncode == 0, done and done.stderr
    assert "Torch CUDA is available: False" in done.stdout and "Using device: cpu" in done.stdout
    assert masks(output) == ["images/tumor-lymph-node-segmentation/output.mha"]
    image = sitk.ReadImage(str(output / masks(output)[0]))  # its bogus prediction, numpy.eye(4, 2)
    assert image.GetSize() == (2, 4) and np.array_equal(sitk.GetArrayFromImage(image), np.eye(4, 2))


SOCKET = "images/tumor-lymph-node-segmentation"


@pytest.mark.parametrize("name", sorted(gc.SAMPLES))
def test_each_sample_does_what_it_is_for(tmp_path, template, case, name):
    inference = gc.participant_edit((template / "inference.py").read_text(), gc.SAMPLES[name])
    timeout, memory = (5, None) if name == "slow" else (60, 1 << 30) if name == "hungry" else (60, None)
    done, output = run_in_own_root(tmp_path, template, case, inference, timeout, memory)
    if name == "slow":
        assert done is None and masks(output) == []  # still asleep when its time was up
        return
    assert done is not None
    if name in ("crash", "hungry"):
        assert done.returncode == 1 and masks(output) == []
        assert ("RuntimeError: no checkpoint" if name == "crash" else "MemoryError") in done.stderr, done.stderr
        return
    assert done.returncode == 0, done.stderr
    if name == "no-output":
        assert masks(output) == []
        return
    assert masks(output) == [f"{SOCKET}/output.mha"] + ([f"{SOCKET}/pet.mha"] if name == "two-images" else [])
    check_mask(output / SOCKET / "output.mha")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert (len(warnings), done.stderr) == ((2, "\n".join(warnings) + "\n") if name == "stderr" else (0, ""))


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    from vmjudge.config import ImageRecipe
    from vmjudge.images.build import build_image

    from .conftest import the_test_site
    root_making_tools()
    root_sqfs = build_image(the_test_site(), ImageRecipe(), progress=lambda m: print(m)).root
    return gc.sample_images(root_sqfs, tmp_path_factory.mktemp("gc-images"))


def test_the_images_are_the_dockerfiles_and_run_in_their_root(images, tmp_path, case):
    from vmjudge.archive.container_image import check_image
    from vmjudge.config.layout import Layout
    from vmjudge.images.entry_root import entry_root

    checked = {name: check_image(path, name=path.name) for name, path in images.items()}
    for i, (name, path) in enumerate(images.items()):
        assert path.name == f"{TAG}_2025-08-15_12-{i:02d}-00.tar.gz", name
        config = checked[name].config
        assert (config.entrypoint, config.cmd, config.user, config.workdir) == (("python", "inference.py"), (),
                                                                                 "user", "/opt/app")
        assert "PYTHONUNBUFFERED=1" in config.env and checked[name].gzipped
    layers = {name: [x.digest for x in image.layers] for name, image in checked.items()}
    assert len({tuple(x[:-1]) for x in layers.values()}) == 1 and len(layers["good"]) == 8
    assert len({x[-1] for x in layers.values()}) == len(gc.SAMPLES)  # each its own inference.py
    root = entry_root(Layout(tmp_path / "home"), images["good"], checked["good"], 1 << 30)
    listing = subprocess.run(["unsquashfs", "-lln", str(root.path)], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    owners = {line.split()[-1].removeprefix("squashfs-root"): line.split()[1] for line in listing if "->" not in line}
    site = "/home/user/.local/lib/python3.11/site-packages"
    for path in ("/home/user", "/opt/app", "/opt/app/inference.py", "/opt/app/resources/some_resource.txt",
                 f"{site}/SimpleITK/__init__.py", f"{site}/numpy/__init__.py"):
        assert owners[path] == "999/999", path
    assert owners["/opt"] == owners["/usr/lib/python3/dist-packages/torch/__init__.py"] == "0/0"
    assert any(re.search(r"/usr/bin/python -> python3$", line) for line in listing)
    tree = tmp_path / "tree"
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(tree), str(root.path)], check=True)
    passwd = (tree / "etc/passwd").read_text().splitlines()
    assert "user:x:999:999::/home/user:/bin/sh" in passwd and "user:x:999:" in (tree / "etc/group").read_text()
    # As the judge runs it: its USER, HOME from its /etc/passwd, its Env, WorkingDir and Entrypoint.
    shutil.copytree(case, tree / "input")
    for d in ("output", "tmp"):
        (tree / d).mkdir(exist_ok=True)
        os.chmod(tree / d, 0o777)
    config = checked["good"].config
    done = subprocess.run(["chroot", "--userspec=999:999", str(tree), "/bin/sh", "-c", 'cd /opt/app && exec "$@"', "sh",
                           *config.command], env={"HOME": "/home/user", **dict(x.split("=", 1) for x in config.env)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert masks(tree / "output") == [f"{SOCKET}/output.mha"]
    check_mask(tree / "output" / SOCKET / "output.mha")
