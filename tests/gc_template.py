"""HECKTOR 2025 Task 1 container entries from Grand Challenge's own algorithm template, without Docker: the
forge (grand-challenge-forge 0.7.5, which Grand Challenge renders `example-algorithm` with) renders the template
for the phase's sockets; its Dockerfile is built here step by step into the layers `docker build` would make,
each image saved as its do_save.sh saves it. There is no pytorch here (nor registry, nor pip index): the base
`pytorch/pytorch` is the judge's Debian layer (segment_images.debian_layer) with `python` linked to python3 and
a stand-in `torch` in the system site-packages; `pip install --user` puts pure-Python stand-ins of SimpleITK
(MetaImage as ITK writes it, zlib included) and numpy where pip would. The rest is the template's as rendered;
each sample edits only the handler's model-tarball lines and bogus prediction (SAMPLES).

Usage: python -m tests.gc_template ROOT_SQFS OUT_DIR   (ROOT_SQFS: HOME/images/KEY/root.sqfs)
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shlex
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

from .oci_images import Layer, LayerFile, Member, directory, file, sha256, symlink
from .segment_images import debian_layer

FORGE = "0.7.5"
PHASE_SLUG = "sanity-check-task-1"  # as HECKTOR 2025's own template names its images
INPUTS = (("ct-image", "Image", "Image", "images/ct"), ("pet-image", "Image", "Image", "images/pet"),
          ("electronic-health-record", "Anything", "Value", "ehr.json"))
OUTPUTS = (("tumor-lymph-node-segmentation", "Segmentation", "Image", "images/tumor-lymph-node-segmentation"),)
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SITE = "usr/lib/python3/dist-packages"  # Debian python3's system site-packages
# The participant's edit replaces the rendered handler's lines from EDIT_FROM up to EDIT_TO.
EDIT_FROM, EDIT_TO = "    # Option 2: upload them as a separate tarball", "    # Save your output\n"

GOOD = '''    # The model: the PET over 40 % of its maximum, in the CT's grid (the PET is resampled to it); the template
    # writes it with SimpleITK.GetImageFromArray, which knows no spacing or origin: the CT's are copied in.
    ct_image = SimpleITK.ReadImage(glob(str(INPUT_PATH / "images/ct" / "*.mha"))[0])
    image_from_array = SimpleITK.GetImageFromArray

    def image_in_ct_grid(array):
        image = image_from_array(array)
        image.CopyInformation(ct_image)
        return image

    SimpleITK.GetImageFromArray = image_in_ct_grid
    output_tumor_lymph_node_segmentation = (input_pet_image > 0.4 * input_pet_image.max()).astype(numpy.uint8)

'''
SAMPLES = {
    "good": GOOD,
    "crash": '    raise RuntimeError("no checkpoint: the model was never trained")\n\n',
    "no-output": "    # The model stops here, and nothing is saved\n    return 0\n\n",
    "two-images": GOOD + '''    # The PET, kept next to the mask
    location = OUTPUT_PATH / "images/tumor-lymph-node-segmentation"
    location.mkdir(parents=True, exist_ok=True)
    SimpleITK.WriteImage(SimpleITK.GetImageFromArray(input_pet_image), location / "pet.mha", useCompression=True)

''',
    "slow": "    import time\n\n    time.sleep(600)  # a model slower than any limit\n" + GOOD,
    "hungry": '''    # A model far larger than the machine: 64 MiB at a time, up to 4 GiB
    weights = bytearray()
    while len(weights) < 4 << 30:
        weights += bytes(64 << 20)
''' + GOOD,
    "stderr": '''    import sys

    print("warning: no GPU, the model runs on the CPU", file=sys.stderr)
    print(f"warning: PET maximum {input_pet_image.max()}, threshold at 40 % of it", file=sys.stderr)
''' + GOOD,
}

# The stand-ins' sources (as pip would install them): compact, one-line methods, as they are data here.
TORCH = r'''"""A stand-in for PyTorch (vmjudge's test images have none): what Grand Challenge's template calls."""
import math, random, types

class device(str): pass

class Tensor(list):
    def to(self, device): return self

class Linear(Tensor):
    def __init__(self, n_in, n_out): super().__init__(random.gauss(0, 1) for _ in range(n_in * n_out))
    def __call__(self, x): return Tensor([sum(w * v for w, v in zip(self, x))])

def randn(*shape): return Tensor(random.gauss(0, 1) for _ in range(math.prod(shape)))
nn = types.SimpleNamespace(Linear=Linear)
cuda = types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0, current_device=lambda: None,
                             get_device_properties=lambda device: None)
'''
NUMPY = r'''"""A stand-in for numpy (vmjudge's test images have none): the calls of Grand Challenge's template and
of the tests' samples. An array is its values (flat), its shape and its dtype, an array module code."""
import operator

uint8, int16, int32, int64, float32, float64, bool_ = "B", "h", "i", "q", "f", "d", "?"

class ndarray:
    def __init__(self, values, shape, dtype): self.flat, self.shape, self.dtype = list(values), tuple(shape), dtype
    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: len(self.flat))
    def max(self): return max(self.flat)
    def astype(self, dtype):
        kind = float if dtype in "fd" else bool if dtype == "?" else int
        return ndarray(map(kind, self.flat), self.shape, dtype)
    def _compare(self, other, op): return ndarray((op(v, other) for v in self.flat), self.shape, bool_)
    def __gt__(self, other): return self._compare(other, operator.gt)
    def __lt__(self, other): return self._compare(other, operator.lt)
def _shape(v): return [len(v), *_shape(v[0])] if isinstance(v, (list, tuple)) else []
def _flat(v): return [x for row in v for x in _flat(row)] if isinstance(v, (list, tuple)) else [v]
def asarray(values, dtype=None):
    if not isinstance(values, ndarray):
        flat = _flat(values)
        values = ndarray(flat, _shape(values), float64 if any(isinstance(v, float) for v in flat) else int64)
    return values.astype(dtype) if dtype is not None and dtype != values.dtype else values
array = asarray
def eye(n, m=None, dtype=float64):
    return ndarray((i == j for i in range(n) for j in range(m or n)), (n, m or n), bool_).astype(dtype)
'''
SIMPLEITK = r'''"""A stand-in for SimpleITK (vmjudge's test images have none): MetaImage (.mha) files read and
written as ITK does (its header; zlib for useCompression), and the image calls of Grand Challenge's template."""
import array, os, sys, zlib
import numpy

ELEMENTS = {"B": "MET_UCHAR", "b": "MET_CHAR", "H": "MET_USHORT", "h": "MET_SHORT", "I": "MET_UINT", "i": "MET_INT",
            "Q": "MET_ULONG_LONG", "q": "MET_LONG_LONG", "f": "MET_FLOAT", "d": "MET_DOUBLE"}
CODES = {name: code for code, name in ELEMENTS.items()}
TRUE = ("true", "1")

class Image:
    def __init__(self, size, code, values, spacing=None, origin=None, direction=None):
        n = len(size)
        self.size, self.code, self.values = tuple(size), code, values
        self.spacing, self.origin = tuple(spacing or [1.0] * n), tuple(origin or [0.0] * n)
        self.direction = tuple(direction or [float(i == j) for i in range(n) for j in range(n)])
    def GetSize(self): return self.size
    def GetSpacing(self): return self.spacing
    def GetOrigin(self): return self.origin
    def GetDirection(self): return self.direction
    def CopyInformation(self, other):
        if other.size != self.size:
            raise RuntimeError(f"Source image size of {list(other.size)} does not match this image's size of "
                               f"{list(self.size)}!")
        self.spacing, self.origin, self.direction = other.spacing, other.origin, other.direction
def ReadImage(fileName, *args, **kwargs):
    with open(fileName, "rb") as f:
        data = f.read()
    head, _, body = data.partition(b"ElementDataFile = LOCAL\n")  # as ITK writes it
    fields = {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in head.decode().splitlines())}
    values = array.array(CODES[fields["ElementType"]])
    values.frombytes(zlib.decompress(body) if fields.get("CompressedData", "").lower() in TRUE else body)
    if fields.get("BinaryDataByteOrderMSB", fields.get("ElementByteOrderMSB", "")).lower() in TRUE:
        values.byteswap()
    numbers = lambda *keys: next(([float(v) for v in fields[k].split()] for k in keys if k in fields), None)
    return Image([int(n) for n in fields["DimSize"].split()], values.typecode, values, numbers("ElementSpacing"),
                 numbers("Offset", "Origin", "Position"), numbers("TransformMatrix", "Rotation", "Orientation"))
def WriteImage(image, fileName, useCompression=False, compressionLevel=-1, *args, **kwargs):
    n, body, numbers = len(image.size), image.values.tobytes(), lambda values: " ".join(f"{v:.17g}" for v in values)
    head = ["ObjectType = Image", f"NDims = {n}", "BinaryData = True",
            f"BinaryDataByteOrderMSB = {sys.byteorder == 'big'}", f"CompressedData = {bool(useCompression)}"]
    if useCompression:
        body = zlib.compress(body, compressionLevel)
        head.append(f"CompressedDataSize = {len(body)}")
    head += [f"TransformMatrix = {numbers(image.direction)}", f"Offset = {numbers(image.origin)}",
             f"CenterOfRotation = {numbers([0] * n)}"] + (["AnatomicalOrientation = RAI"] if n == 3 else [])
    head += [f"ElementSpacing = {numbers(image.spacing)}", f"DimSize = {' '.join(map(str, image.size))}",
             f"ElementType = {ELEMENTS[image.code]}", "ElementDataFile = LOCAL"]
    with open(os.fspath(fileName), "wb") as f:
        f.write(("\n".join(head) + "\n").encode() + body)
def GetArrayFromImage(image): return numpy.ndarray(image.values, image.size[::-1], image.code)
def GetImageFromArray(arr, isVector=False):
    arr = numpy.asarray(arr)
    code = "B" if arr.dtype == "?" else arr.dtype
    return Image(arr.shape[::-1], code, array.array(code, arr.flat))
'''
PSUTIL = r'''"""A stand-in for psutil (vmjudge's test images have none): what the evaluation template's helpers.py
calls to end its pool's children, read from /proc."""
import os, signal, time
class NoSuchProcess(Exception): pass
class Process:
    def __init__(self, pid=None): self.pid = os.getpid() if pid is None else pid
    def children(self, recursive=False):
        parents = {}
        for d in filter(str.isdigit, os.listdir("/proc")):
            try: parents.setdefault(int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except (OSError, IndexError, ValueError): pass
        found, todo = [], [self.pid]
        while todo:
            for kid in parents.get(todo.pop(), []):
                found.append(Process(kid)); todo += [kid] if recursive else []
        return found
    def _send(self, sig):
        try: os.kill(self.pid, sig)
        except ProcessLookupError: raise NoSuchProcess(self.pid) from None
    def terminate(self): self._send(signal.SIGTERM)
    def kill(self): self._send(signal.SIGKILL)
def _gone(pid):
    try: return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError: return not os.path.exists(f"/proc/{pid}")
def wait_procs(procs, timeout=None):
    deadline, alive = time.monotonic() + (timeout or 0), list(procs)
    while alive:
        alive = [p for p in alive if not _gone(p.pid)]
        if not alive or time.monotonic() >= deadline: break
        time.sleep(0.05)
    return [p for p in procs if p not in alive], alive
'''
STAND_INS = {"torch": TORCH, "numpy": NUMPY, "SimpleITK": SIMPLEITK, "psutil": PSUTIL}
BASES = ("pytorch/pytorch", "docker.io/library/python:3.11-slim")  # each the judge's Debian layer, python linked


def render(out: Path) -> Path:
    """The forge's example-algorithm for the phase's sockets, rendered by the forge itself into `out`."""
    from grand_challenge_forge.forge import generate_algorithm_template

    inputs, outputs = ([{"slug": s, "kind": k, "super_kind": sk, "relative_path": p, "example_value": None}
                        for s, k, sk, p in rows] for rows in (INPUTS, OUTPUTS))
    context = {"algorithm": {"title": "HECKTOR 2025 Task 1", "slug": PHASE_SLUG, "url": "https://hecktor25.grand-challenge.org/",
                             "algorithm_interfaces": [{"inputs": inputs, "outputs": outputs}]}}
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zip_file:
        generate_algorithm_template(context=context, output_zip_file=zip_file, target_zpath=Path("example-algorithm"))
    with zipfile.ZipFile(archive) as zip_file:  # extracted as the forge's `unzip -o` would, modes kept
        for info in zip_file.infolist():
            (out / info.filename).parent.mkdir(parents=True, exist_ok=True)
            (out / info.filename).write_bytes(zip_file.read(info))
            os.chmod(out / info.filename, info.external_attr >> 16 & 0o777)
    return out / "example-algorithm"


def participant_edit(inference: str, code: str) -> str:
    """The rendered inference.py with its model-tarball lines and bogus prediction replaced by `code`."""
    assert inference.count(EDIT_FROM) == inference.count(EDIT_TO) == 1, "the template's handler has changed"
    return inference[:inference.index(EDIT_FROM)] + code + inference[inference.index(EDIT_TO):]


class Build:
    """The rendered Dockerfile's steps on `base`, each as `docker build` (BuildKit) does it: the layers and
    the config. A step it does not know is refused. Layers are files named by digest in `work`: the same
    step on the same files gives the same layer to every sample, as Docker's build cache would."""

    def __init__(self, context: Path, base: LayerFile, work: Path):
        self.context, self.work = context, work
        self.layers, self.history = [base], [{"created_by": f"pytorch/pytorch: {x}"} for x in ("Debian", "torch")]
        self.env, self.user, self.workdir, self.entrypoint = [PATH], "", "/", None
        with tarfile.open(base.path) as tf:
            self.etc = {n: tf.extractfile(f"etc/{n}").read().decode() for n in ("passwd", "group")}  # type: ignore
        self.dirs: dict[str, tuple[int, int, int]] = {}  # the directories made here: mode, owner, group
        self.files: dict[str, bytes] = {}  # what the COPY steps put in the image
        self.layer([directory("opt"), symlink("usr/bin/python", "python3"),
                    file(f"{SITE}/torch/__init__.py", TORCH.encode())])
        for line in re.sub(r"\\\n", " ", (context / "Dockerfile").read_text()).splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                keyword, _, args = line.strip().partition(" ")
                args, layers = " ".join(args.split()), len(self.layers)
                getattr(self, f"do_{keyword.lower()}")(args)  # a step it does not know: AttributeError
                if keyword != "FROM":
                    empty = {"empty_layer": True} if len(self.layers) == layers else {}
                    self.history.append({"created_by": f"{keyword} {args}", **empty})

    def layer(self, members: list[Member]) -> None:
        """A layer of `members`, after their parent directories as they are by then."""
        names = {m.info.name for m in members}
        parents = sorted({"/".join(n.split("/")[:i]) for n in names for i in range(1, n.count("/") + 1)} - names)
        members = [directory(p, *self.dirs.get(p, (0o755, 0, 0))) for p in parents] + members
        self.dirs.update({m.info.name: (m.info.mode, m.info.uid, m.info.gid) for m in members if m.info.isdir()})
        data = Layer.of(members, None).blob
        path = self.work / f"{sha256(data)}.tar"
        path.write_bytes(data)
        self.layers.append(LayerFile(path, "sha256:" + sha256(data)))

    def ids(self, user: str) -> tuple[int, int, str]:
        """A user's uid, gid and home, from the image's /etc/passwd."""
        fields = next(x.split(":") for x in self.etc["passwd"].splitlines() if x.split(":")[0] == user)
        return int(fields[2]), int(fields[3]), fields[5].strip("/")

    def do_from(self, args: str) -> None:
        # The evaluation template's python:3.11-slim stands on the same Debian layer (tests/gc_evaluation.py).
        assert args.split()[1] in BASES, f"FROM {args}: a base with no stand-in here"

    def do_env(self, args: str) -> None:
        self.env += shlex.split(args)

    def do_user(self, args: str) -> None:
        self.user = args

    def do_entrypoint(self, args: str) -> None:
        self.entrypoint = json.loads(args)

    def do_workdir(self, args: str) -> None:
        self.workdir, (uid, gid, _) = args, self.ids(self.user or "root")  # BuildKit makes it as the USER
        self.layer([directory(args.strip("/"), uid=uid, gid=gid)])

    def do_copy(self, args: str) -> None:
        *flags, source, dest = shlex.split(args)
        assert all(f.startswith("--chown=") for f in flags), f"COPY {args}: not built here"
        own = self.ids(flags[-1][8:].split(":")[0])[:2] if flags else (0, 0)
        top, dest, members = self.context / source, dest.strip("/") + (f"/{source}" if dest.endswith("/") else ""), []
        for path in [top, *sorted(top.rglob("*"))]:
            name, mode = dest + path.as_posix()[len(top.as_posix()):], path.stat().st_mode & 0o777
            self.files[name] = b"" if path.is_dir() else path.read_bytes()
            members.append(directory(name, mode, *own) if path.is_dir() else file(name, self.files[name], mode, *own))
        self.layer(members)

    def do_run(self, args: str) -> None:
        if args == "groupadd -r user && useradd -m --no-log-init -r -g user user":  # system ids: 999 down
            uid, gid = (max(set(range(100, 1000)) - {int(x.split(":")[2]) for x in self.etc[n].splitlines()})
                        for n in ("passwd", "group"))
            self.etc["group"] += f"user:x:{gid}:\n"
            self.etc["passwd"] += f"user:x:{uid}:{gid}::/home/user:/bin/sh\n"
            self.layer([file("etc/group", self.etc["group"].encode()), file("etc/passwd", self.etc["passwd"].encode()),
                        directory("home"), directory("home/user", 0o750, uid, gid)])
            return
        assert args == "python -m pip install --user --no-cache-dir --no-color --requirement " \
                       "/opt/app/requirements.txt", f"RUN {args}: not built here"
        uid, gid, home = self.ids(self.user)
        site = f"{home}/.local/lib/python3.11/site-packages"
        members = [directory(f"{home}/{d}", uid=uid, gid=gid)
                   for d in (".local", ".local/lib", ".local/lib/python3.11", ".local/lib/python3.11/site-packages")]
        for name in self.files["opt/app/requirements.txt"].decode().split():
            assert name in STAND_INS, f"requirements.txt asks for {name}, which has no stand-in"
            info, metadata = f"{site}/{name}-0.dist-info", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0\n"
            members += [directory(f"{site}/{name}", uid=uid, gid=gid), directory(info, uid=uid, gid=gid),
                        file(f"{info}/METADATA", metadata.encode(), uid=uid, gid=gid),
                        file(f"{site}/{name}/__init__.py", STAND_INS[name].encode(), uid=uid, gid=gid)]
        self.layer(members)

    def save(self, path: Path, tag: str, created: str) -> Path:
        """What `docker save TAG | gzip -c > PATH` writes (docker save before Docker 25)."""
        config = json.dumps({
            "architecture": "amd64", "os": "linux", "created": created, "history": self.history,
            "config": {"Env": self.env, "Entrypoint": self.entrypoint, "Cmd": None, "WorkingDir": self.workdir,
                       "User": self.user, "Labels": None},
            "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in self.layers]}}, sort_keys=True).encode()
        ids = [sha256(f"{i}:{x.diff_id}".encode()) for i, x in enumerate(self.layers)]
        manifest = [{"Config": f"{sha256(config)}.json", "RepoTags": [f"{tag}:latest"],
                     "Layers": [f"{x}/layer.tar" for x in ids]}]
        with gzip.open(path, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w") as tf:
            def put(name: str, data: bytes) -> None:
                ti = tarfile.TarInfo(name)
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
                tf.addfile(ti, io.BytesIO(data))
            for layer_id, layer in zip(ids, self.layers, strict=True):
                put(f"{layer_id}/VERSION", b"1.0")
                put(f"{layer_id}/json", json.dumps({"id": layer_id}).encode())
                put(f"{layer_id}/layer.tar", layer.path.read_bytes())
            put(f"{sha256(config)}.json", config)
            put("manifest.json", json.dumps(manifest).encode())
            put("repositories", json.dumps({tag: {"latest": sha256(config)}}).encode())
        return path


def saved_name(do_save: str, created: str) -> tuple[str, str]:
    """The image's tag and the file name do_save.sh gives it, from its own lines."""
    tag = re.search(r'^DOCKER_IMAGE_TAG="([^"]+)"', do_save, re.M).group(1)  # type: ignore[union-attr]
    assert "sed -E 's/(.*)T(.*)\\..*Z/\\1_\\2/' | sed 's/[-,:]/-/g'" in do_save, "do_save.sh names files otherwise"
    when = re.sub(r"[-,:]", "-", re.sub(r"(.*)T(.*)[.].*Z", r"\1_\2", created))
    return tag, f"{tag}_{when}.tar.gz"


def sample_images(root_sqfs: Path, out: Path) -> dict[str, Path]:
    """SAMPLES saved as do_save.sh saves them, in `out`, each built a minute after the last: all of the
    same layers but the last, the COPY of its own inference.py."""
    work = out / "gc-layers"
    work.mkdir(parents=True, exist_ok=True)
    template, base = render(work / "rendered"), debian_layer(root_sqfs, work)
    images = {}
    for i, (name, code) in enumerate(SAMPLES.items()):
        context = work / name
        shutil.copytree(template, context)
        (context / "inference.py").write_text(participant_edit((template / "inference.py").read_text(), code))
        created = f"2025-08-15T12:{i:02d}:00.{i:09d}Z"
        tag, filename = saved_name((template / "do_save.sh").read_text(), created)
        images[name] = Build(context, base, work).save(out / filename, tag, created)
    shutil.rmtree(work)
    return images


if __name__ == "__main__":
    made = sample_images(Path(sys.argv[1]), Path(sys.argv[2]))
    print("\n".join(f"{name}: {path}" for name, path in made.items()))
