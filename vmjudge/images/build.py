"""`vmjudge image build`: the guest root (mmdebstrap), its kernel, initramfs and manifest.

The output directory is named by a hash of everything that decides its content (the
recipe, the Debian sources, the guest code and this builder), so an unchanged recipe is
found again at once and a changed one can never be mistaken for the old.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import ImageRecipe, Site
from ..errors import ImageError
from ..files import sha256_file
from . import build_step, gpu_driver, initramfs, kernel_modules
from .guest import frames
from .image import FILES, GuestImage
from .kernel_modules import prune_modules

BASE_PACKAGES = ("python3", "e2fsprogs", "busybox-static", "tiny-initramfs", "linux-image-amd64")
GUEST_DIR = Path(__file__).parent / "guest"
# The agent and every module it imports, copied side by side to /opt/vmjudge (the guest has no vmjudge).
GUEST_FILES = ("agent.py", "channel.py", "command.py", "command_place.py", "frames.py", "hardening.py", "media.py",
               "root_disk.py", "root_gpu.py", "root_layers.py", "root_spec.py", "root_start.py", "run_guard.py",
               "samples.py", "system.py", "usage.py", "gpu.py", "gpu_memory.py", "cpu.py", "wake.py", "init",
               "gpu-init", "code_dir.py")
ENTRY_UID = 1000
EXCLUDE_DOCS = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")

Progress = Callable[[str], None]


def agent_version() -> str:
    match = re.search(r'^AGENT_VERSION = "([^"]+)"', (GUEST_DIR / "agent.py").read_text(), re.M)
    assert match, "agent.py must define AGENT_VERSION"
    return match.group(1)


def _sources(site: Site, recipe: ImageRecipe) -> list[str]:
    areas = " ".join(gpu_driver.components(recipe.components) if recipe.gpu else recipe.components)
    return [f"deb {site.mirror} {site.suite} {areas}",
            f"deb {site.mirror} {site.suite}-updates {areas}",
            f"deb {site.security_mirror} {site.suite}-security {areas}"]


def recipe_document(site: Site, recipe: ImageRecipe) -> dict:
    """Everything that decides the image's content; its hash names the image."""
    code = hashlib.sha256()
    builder = [Path(__file__), Path(initramfs.__file__), Path(kernel_modules.__file__), Path(build_step.__file__)]
    for path in sorted(GUEST_DIR.iterdir()) + builder:
        if path.is_file() and not path.name.endswith(".pyc"):
            code.update(path.name.encode() + b"\0" + path.read_bytes())
    doc: dict[str, Any] = {"suite": site.suite, "sources": _sources(site, recipe),
                           "packages": sorted(set(BASE_PACKAGES) | set(recipe.packages)),
                           "pip": sorted(recipe.pip), "code": code.hexdigest()}
    if recipe.build is not None:  # the script by content, and every file it may read: a new tarball, a new image
        assert recipe.build_dir is not None
        doc["build"] = {"script": recipe.build,
                        "tree": build_step.tree_hash(recipe.build_dir, site.layout.tree_hashes(recipe.build_dir))}
    if recipe.gpu is not None:  # absent, not null, for a CPU image: its key stays what it was
        doc["gpu"] = gpu_driver.document(recipe.gpu)
    return doc


def image_key(site: Site, recipe: ImageRecipe) -> str:
    return _key(recipe_document(site, recipe))


def _key(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def find_image(site: Site, recipe: ImageRecipe) -> GuestImage:
    """The built image for this recipe, or an error telling how to build it."""
    directory = site.layout.images / image_key(site, recipe)
    if not (directory / "manifest.json").exists():
        raise ImageError("the guest image for this challenge is not built: run `vmjudge image build CHALLENGE_DIR`.")
    return GuestImage.load(directory)


def newest_image(site: Site) -> GuestImage:
    """The most recently built image, for checks that need one but no particular challenge."""
    built = sorted(site.layout.images.glob("*/manifest.json"), key=lambda p: p.stat().st_mtime) \
        if site.layout.images.is_dir() else []
    if not built:
        raise ImageError(f"no guest image is built under {site.layout.images}: "
                         "run `vmjudge image build CHALLENGE_DIR`.")
    return GuestImage.load(built[-1].parent)


def _check_host() -> None:
    for tool, package in (("mmdebstrap", "mmdebstrap"), ("mksquashfs", "squashfs-tools")):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} is not installed: run `make setup` or `apt-get install {package}`.")
    if os.geteuid() != 0:
        raise ImageError("building the guest image needs root (mmdebstrap makes device nodes and chroots "
                         "into the new system): run the build as root, e.g. `sudo vmjudge image build DIR`.")


def _run_logged(argv: list[str], progress: Progress, what: str) -> str:
    """Run a build tool, passing its info lines to `progress`; returns its whole output."""
    lines: list[str] = []
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("I: "):
            progress("    " + line[3:].rstrip())
    if proc.wait() != 0:
        output = "\n".join(lines)
        missing = re.findall(r"Unable to locate package (\S+)|Package '?([^' ]+)'? has no installation candidate",
                             output)
        names = sorted({a or b for a, b in missing})
        if names:
            raise ImageError(f"Debian has no package named {', '.join(names)}: correct [image] packages "
                             "in challenge.toml.")
        pip_missing = re.findall(r"No matching distribution found for (\S+)", output)
        if pip_missing:
            raise ImageError(f"pip found no release of {', '.join(pip_missing)}: correct [image] pip in "
                             "challenge.toml.")
        tail = "\n".join(lines[-15:])
        raise ImageError(f"{what} failed (exit {proc.returncode}); its last lines:\n{tail}")
    return "\n".join(lines)


def build_image(site: Site, recipe: ImageRecipe, progress: Progress = print, force: bool = False) -> GuestImage:
    doc = recipe_document(site, recipe)  # once: with a build script it hashes all of image/
    key = _key(doc)
    final = site.layout.images / key
    site.layout.images.mkdir(parents=True, exist_ok=True)
    os.chmod(site.layout.images, 0o755)
    with open(site.layout.images / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "manifest.json").exists() and not force:
            image = GuestImage.load(final)
            progress(f"image {key} is up to date ({final})")
            return image
        _check_host()
        started = time.monotonic()
        work = site.layout.images / f".build-{key}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            manifest = _build(site, recipe, doc, work, progress)
            manifest["key"] = key
            manifest["build_seconds"] = round(time.monotonic() - started, 1)
            (work / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            for name in FILES + ("manifest.json",):
                os.chmod(work / name, 0o644)
            os.chmod(work, 0o755)
            if final.exists():
                shutil.rmtree(final)
            os.replace(work, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    size = sum((final / n).stat().st_size for n in FILES)
    progress(f"image {key} built in {manifest['build_seconds']} s: {size / 1e6:.0f} MB in {final}")
    return GuestImage.load(final)


def _build(site: Site, recipe: ImageRecipe, doc: dict, work: Path, progress: Progress) -> dict:
    root = work / "root"
    step = _Steps(progress, 5 + bool(recipe.build) + bool(recipe.gpu))
    packages = list(doc["packages"]) + (["python3-pip"] if recipe.pip else [])
    gpu_packages = doc["gpu"]["packages"] + doc["gpu"]["build_packages"] if recipe.gpu else []
    step(f"mmdebstrap: Debian {site.suite} minbase + {len(doc['packages'])} packages"
         + (f" + the {recipe.gpu} driver's {len(gpu_packages)}" if recipe.gpu else ""))
    argv = ["mmdebstrap", "--mode=root", "--variant=minbase", "--include=" + ",".join(packages + gpu_packages)]
    if recipe.gpu:
        argv.append(f"--setup-hook={gpu_driver.SETUP_HOOK}")
    argv += [f"--dpkgopt=path-exclude={p}" for p in EXCLUDE_DOCS]
    if recipe.pip:
        pip = " ".join(shlex.quote(p) for p in recipe.pip)
        argv.append(f'--customize-hook=chroot "$1" python3 -m pip install --break-system-packages '
                    f'--no-cache-dir --root-user-action=ignore {pip}')
    argv += [site.suite, str(root)] + doc["sources"]
    _run_logged(argv, progress, "mmdebstrap")
    kernel_version = _kernel_version(root)

    gpu = None
    if recipe.gpu:  # before the challenge's script, which then sees the packages the image keeps
        step(f"GPU driver {recipe.gpu}: its kernel module for the guest kernel {kernel_version}")
        keep = set(packages) | set(gpu_driver.driver(recipe.gpu).runtime)
        gpu = gpu_driver.install(root, recipe.gpu, kernel_version, keep, progress)

    built = None
    if recipe.build:
        step(f"the challenge's build script {recipe.build} (no network, at most {recipe.build_timeout:g} s)")
        built = build_step.run_build(root, recipe, doc["build"]["tree"], work / "build-tmp", progress)
        progress(f"    {recipe.build} installed {built['installed_count']} files in {built['seconds']:g} s")

    step("guest user, agent and init")
    _install_guest(root)
    dpkg = subprocess.run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f=${Package}\t${Version}\n"],
                          check=True, capture_output=True, text=True).stdout
    installed = dict(line.split("\t") for line in dpkg.splitlines() if line)
    pip_frozen: list[str] = []
    if recipe.pip:
        pip_frozen = subprocess.run(["chroot", str(root), "python3", "-m", "pip", "list", "--format=freeze"],
                                    capture_output=True, text=True).stdout.split()

    step("kernel and initramfs")
    freed = prune_modules(root, kernel_version)
    progress(f"    removed {freed / 1e6:.0f} MB of network, radio and sound drivers")
    if recipe.gpu:
        assert gpu is not None
        gpu = gpu_driver.finish(root, recipe.gpu, kernel_version, gpu)
        progress("    " + "; ".join(f"{m['path']} (vermagic {m['vermagic'].strip()})" for m in gpu["modules"]))
    shutil.copyfile(root / "boot" / f"vmlinuz-{kernel_version}", work / "vmlinuz")
    modules = initramfs.build_initramfs(root, kernel_version, GUEST_DIR / "initramfs-init", work / "initrd.img",
                                        gpu=bool(recipe.gpu))

    # lz4: 35 % larger than zstd but quicker to read under emulation (0.3 s less to boot, measured).
    step("squashfs root (lz4)")
    _run_logged(["mksquashfs", str(root), str(work / "root.sqfs"), "-comp", "lz4", "-noappend", "-quiet",
                 "-no-progress", "-e", "boot"], progress, "mksquashfs")
    step("manifest")
    debian_version = (root / "etc" / "debian_version").read_text().strip()  # the point release: "12.12"
    shutil.rmtree(root)
    return {
        "recipe": {"packages": list(recipe.packages), "pip": list(recipe.pip),
                   "components": list(recipe.components), "build": recipe.build,
                   **({"gpu": recipe.gpu} if recipe.gpu else {})},
        "build": built, **({"gpu": gpu} if gpu else {}),
        "suite": site.suite, "sources": doc["sources"], "code": doc["code"],
        "packages": installed, "pip_packages": pip_frozen,
        "kernel_version": kernel_version, "initramfs_modules": modules, "debian_version": debian_version,
        "agent_version": agent_version(), "protocol": frames.PROTOCOL,
        "sha256": {name: sha256_file(work / name) for name in FILES},
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _kernel_version(root: Path) -> str:
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise ImageError("the guest root has no kernel in /boot: keep linux-image-amd64 in the base packages.")
    return kernels[-1].name[len("vmlinuz-"):]


def _install_guest(root: Path) -> None:
    subprocess.run(["chroot", str(root), "useradd", "--uid", str(ENTRY_UID), "--user-group", "--no-create-home",
                    "--home-dir", "/home/entry", "--shell", "/bin/bash", "entry"], check=True,
                   capture_output=True)
    for d in ("home/entry", "media/cdrom", "opt/vmjudge"):
        (root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(root / d, 0o755)
    for name in GUEST_FILES:
        target = root / "opt" / "vmjudge" / name
        shutil.copyfile(GUEST_DIR / name, target)
        os.chmod(target, 0o755 if name in ("init", "gpu-init") else 0o644)
    # Compiled once here: the overlay would otherwise compile the agent again at every boot.
    subprocess.run(["chroot", str(root), "python3", "-m", "compileall", "-q", "/opt/vmjudge"], check=True)


class _Steps:
    """Numbered progress lines with the time each step started."""

    def __init__(self, progress: Progress, total: int):
        self.progress, self.total, self.n, self.t0 = progress, total, 0, time.monotonic()

    def __call__(self, what: str) -> None:
        self.n += 1
        self.progress(f"[{self.n}/{self.total}] {what} (t+{time.monotonic() - self.t0:.0f} s)")
