"""The sample entries of examples/segment2025 as container images, built without Docker from a
Debian root: the judge's own guest root (root.sqfs, Debian's python3 and its libraries, read with
unsquashfs), so the images need no network and no registry.

Every sample image has the same two layers, a Debian one (python3, dash, the C library, as
Debian's packages install them, with the standard library less what no sample imports) and one
holding every sample's inference.py under /app/NAME/ and the good entry's masks under /submitted;
each image's CMD runs its own script. The judge thus makes one root for all of them (the same
layers), as it does for a team's images that differ only in their command. The `hostile` sample adds
a layer a hostile image would carry (a setuid program, a link to the host's /etc/shadow, a disk's
device node, /output made a link to /etc), which the judge neutralises; REFUSED are images whose
layers admission refuses, each for its own reason.

Usage: python -m tests.segment_images ROOT_SQFS OUT_DIR   (ROOT_SQFS: HOME/images/KEY/root.sqfs)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from . import oci_images as oci
from .oci_images import Image, Layer, LayerFile, declared_layer, device, directory, file, hardlink, sparse_layer

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "segment2025"
SAMPLES = ("good", "crash", "outside", "network", "slow", "hungry", "hostile")
# What the Debian layer takes from the judge's root (unsquashfs patterns): the interpreter, sh, and the
# libraries the interpreter links (ldd /usr/bin/python3.11 on Debian 12).
DEBIAN_PATHS = ("bin", "lib", "lib64", "sbin", "usr/bin/python3", "usr/bin/python3.11", "usr/bin/dash",
                "usr/bin/sh", "usr/lib/python3.11", "usr/lib64", "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                "usr/lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libm.so.6",
                "usr/lib/x86_64-linux-gnu/libz.so.*", "usr/lib/x86_64-linux-gnu/libexpat.so.*", "etc/passwd",
                "etc/group")
# Parts of the standard library no sample imports, left out to keep the layer (and each test's root) small.
LEFT_OUT = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "unittest",
            "distutils", "asyncio", "multiprocessing", "sqlite3", "curses", "dbm", "xmlrpc", "wsgiref")
CONFIG = {"env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "workdir": "/app"}
# Images admission refuses: name -> what its sentence says.
REFUSED = {
    "whiteout-root": "whiteout",
    "hardlink-host": "hard link",
    "sparse-10g": "sparse",
    "file-10g": "more than",
}


def debian_layer(root_sqfs: Path, work: Path, keep: tuple[str, ...] = ()) -> LayerFile:
    """The Debian layer, from the judge's root; `keep`: parts of LEFT_OUT an image needs after all."""
    tree = work / "debian"
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(tree), str(root_sqfs), *DEBIAN_PATHS], check=True,
                   stdout=subprocess.DEVNULL, timeout=600)
    left_out = set(LEFT_OUT) - set(keep)
    for name in left_out:
        shutil.rmtree(tree / "usr/lib/python3.11" / name, ignore_errors=True)
    for cache in (tree / "usr/lib/python3.11").rglob("__pycache__"):
        if cache.parent.name in left_out:
            shutil.rmtree(cache)

    def add(tf: tarfile.TarFile) -> None:
        for path in sorted(tree.rglob("*")):
            tf.add(path, arcname=path.relative_to(tree).as_posix(), recursive=False)
    layer = LayerFile.write(work / "debian.tar", add)
    shutil.rmtree(tree)
    return layer


def samples_layer(work: Path) -> LayerFile:
    members = [directory("app"), directory("submitted")]
    for name in SAMPLES:
        members += [directory(f"app/{name}"),
                    file(f"app/{name}/inference.py", (EXAMPLE / "entries" / name / "inference.py").read_bytes())]
    for mask in sorted((EXAMPLE / "entries" / "good" / "submitted").glob("*.mha")):
        members.append(file(f"submitted/{mask.name}", mask.read_bytes()))
    path = work / "samples.tar"
    path.write_bytes(oci.layer_tar(members))
    return LayerFile(path, Layer.raw(path.read_bytes(), None).diff_id)


def hostile_layer() -> Layer:
    """What the hostile sample's image adds: each neutralised when its root is made or by the agent."""
    return Layer.of([file("app/hostile/suid", b"#!/bin/sh\nid\n", mode=0o4755),
                     oci.symlink("app/hostile/escape", "../../../../../../etc/shadow"),
                     directory("dev"), device("dev/sda", "b", 8, 0), oci.symlink("output", "/etc")], None)


def _layer_file(work: Path, name: str, layer: Layer) -> LayerFile:
    path = work / f"{name}.tar"
    path.write_bytes(layer.blob)
    return LayerFile(path, layer.diff_id)


def sample_images(root_sqfs: Path, out: Path) -> dict[str, Path]:
    """NAME-image.tar for every sample (docker save's format) in `out`."""
    work = out / "layers"
    work.mkdir(parents=True, exist_ok=True)
    base = [debian_layer(root_sqfs, work), samples_layer(work)]
    hostile = _layer_file(work, "hostile", hostile_layer())
    images = {}
    for name in SAMPLES:
        labels = {"org.vmjudge.dryrun": "1"} if name == "hostile" else {}
        layers = base + [hostile] if name == "hostile" else base
        images[name] = oci.docker_save_files(out / f"{name}-image.tar", layers,
                                             cmd=["python3", f"/app/{name}/inference.py"], labels=labels, **CONFIG)
    shutil.rmtree(work)
    return images


def refused_images(out: Path) -> dict[str, Path]:
    """NAME-image.tar for each of REFUSED: the samples' layer, then the hostile one."""
    work = out / "refused-layers"
    work.mkdir(parents=True, exist_ok=True)
    samples = samples_layer(work)
    hostile = {
        "whiteout-root": Layer.of([file(".wh..", b"")], None),
        "hardlink-host": Layer.of([directory("app"), hardlink("app/shadow", "/etc/shadow")], None),
        "sparse-10g": Layer.raw(sparse_layer("app/weights.bin", 10 * 10**9), None),
        "file-10g": Layer.raw(declared_layer("app/weights.bin", 10 << 30), None),
    }
    images = {}
    for name, layer in hostile.items():
        image = Image([Layer.raw(samples.path.read_bytes(), None), layer], cmd=["python3", "/app/good/inference.py"])
        images[name] = oci.docker_save(out / f"{name}-image.tar", image)
    shutil.rmtree(work)
    return images


if __name__ == "__main__":
    made = sample_images(Path(sys.argv[1]), Path(sys.argv[2]))
    print("\n".join(str(p) for p in made.values()))
