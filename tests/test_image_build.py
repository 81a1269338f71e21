"""The guest image: manifest, cache, integrity check, and the build's error messages."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from vmjudge.config import ImageRecipe, load_challenge
from vmjudge.errors import ImageError, InfrastructureError
from vmjudge.files import sha256_file
from vmjudge.images import build, initramfs, kernel_modules
from vmjudge.images.guest import frames
from vmjudge.images.image import GuestImage

from .cli import run_cli


def test_manifest_pins_every_file_and_package(image):
    m = image.manifest
    for name in ("root.sqfs", "vmlinuz", "initrd.img"):
        assert m["sha256"][name] == sha256_file(image.directory / name)
    assert {"python3", "linux-image-amd64", "busybox-static"} <= set(m["packages"])
    assert all(v for v in m["packages"].values())  # every package with its version
    assert m["agent_version"] == build.agent_version() and m["protocol"] == frames.PROTOCOL
    assert m["recipe"] == {"packages": [], "pip": [], "components": ["main"], "build": None}
    assert m["build"] is None  # no build script, no build step
    assert m["kernel_version"].endswith("-amd64") and "cloud" not in m["kernel_version"]
    assert "kernel/drivers/char/virtio_console.ko" in m["initramfs_modules"]


def test_kernel_has_usb_and_sata_for_the_replica_and_no_network_drivers(image):
    """Debian's generic kernel, so the replica boots from a stick on a real computer; its module
    tree trimmed of network, radio and sound drivers, and still consistent."""
    members = initramfs.read_newc(gzip.decompress(image.initrd.read_bytes()))
    replica = [line.split()[0] for line in members["modules-replica.list"].data.decode().splitlines()]
    for wanted in ("usb-storage.ko", "uas.ko", "xhci-pci.ko", "ehci-pci.ko", "ahci.ko", "usbhid.ko", "loop.ko"):
        assert any(p.endswith("/" + wanted) for p in replica), wanted
    assert not set(replica) & {line.split()[0] for line in members["modules.list"].data.decode().splitlines()}
    listing = subprocess.run(["unsquashfs", "-l", "-d", "", str(image.root)], capture_output=True, text=True,
                             check=True, timeout=300).stdout.split()
    version = image.manifest["kernel_version"]
    tree = f"/lib/modules/{version}/kernel/"
    modules = [p.split(tree, 1)[1] for p in listing if tree in p and p.endswith(".ko")]
    assert len(modules) > 1000
    assert "drivers/gpu/drm/drm.ko" in modules  # kept, for GPU passthrough
    for pruned in kernel_modules.PRUNED:
        assert not [m for m in modules if m.startswith(pruned + "/")], pruned
    dep = subprocess.run(["unsquashfs", "-cat", str(image.root), f"usr/lib/modules/{version}/modules.dep"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    needed = {p for line in dep.splitlines() for p in line.replace(":", " ").split()}
    assert needed and needed <= {f"kernel/{m}" for m in modules}


def test_unchanged_recipe_is_not_rebuilt(site, image):
    before = (image.directory / "manifest.json").stat().st_mtime_ns
    said = []
    again = build.build_image(site, ImageRecipe(), progress=said.append)
    assert again.directory == image.directory
    assert (image.directory / "manifest.json").stat().st_mtime_ns == before
    assert said == [f"image {image.key} is up to date ({image.directory})"]


def test_recipe_and_guest_code_change_the_key(site):
    base = build.image_key(site, ImageRecipe())
    assert build.image_key(site, ImageRecipe(packages=("python3-numpy",))) != base
    assert build.image_key(site, ImageRecipe(pip=("wfdb==4.3.1",))) != base
    assert build.image_key(site, ImageRecipe(packages=("python3",))) == base  # already in the base


def test_altered_image_file_is_detected(image, tmp_path):
    copy = tmp_path / "img"
    copy.mkdir()
    for name in ("root.sqfs", "vmlinuz"):
        (copy / name).symlink_to(image.directory / name)
    shutil.copy(image.directory / "manifest.json", copy)
    data = bytearray((image.directory / "initrd.img").read_bytes())
    data[100] ^= 0xFF
    (copy / "initrd.img").write_bytes(bytes(data))
    with pytest.raises(ImageError, match="initrd.img differs from its manifest"):
        GuestImage.load(copy).verify()


def test_unknown_debian_package_is_named(site):
    with pytest.raises(ImageError, match="Debian has no package named no-such-package-vmjudge: correct"):
        build.build_image(site, ImageRecipe(packages=("no-such-package-vmjudge",)), progress=lambda m: None)
    assert list(site.layout.images.glob(".build-*")) == []


def test_a_build_script_that_downloads_fails_and_leaves_nothing(site, tmp_path):
    """The mirror mmdebstrap has just downloaded from is out of the build script's reach, the
    failure says so with the script's last lines, and nothing of the image is kept."""
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "build.sh").write_text(
        "echo fetching the sources\n"
        f"python3 -c 'import urllib.request; urllib.request.urlopen(\"{site.mirror}/\", timeout=20)'\n")
    (tmp_path / "challenge.toml").write_text('name = "offline"\n[image]\nbuild = "image/build.sh"\n')
    key = build.image_key(site, load_challenge(tmp_path).image)
    proc = vmjudge("--home", str(site.home), "image", "build", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "[2/6] the challenge's build script image/build.sh (no network, at most 1800 s)" in proc.stderr
    assert "    | fetching the sources\n" in proc.stderr  # its output, shown as it runs
    sentence = proc.stderr.split("vmjudge: ", 1)[1]
    assert sentence.startswith("the build script image/build.sh failed (exit 1) after ")
    assert "without network" in sentence
    tail = sentence.split("Its last lines:\n", 1)[1].splitlines()
    # no name, no route: no network
    assert len(tail) == 20 and tail[-1].startswith("urllib.error.URLError: <urlopen error [Errno ")
    assert not (site.layout.images / key).exists() and list(site.layout.images.glob(".build-*")) == []
    with pytest.raises(ImageError, match="is not built"):
        build.find_image(site, load_challenge(tmp_path).image)


def test_build_needs_root_and_tools(site, monkeypatch):
    recipe = ImageRecipe(packages=("hello",))
    monkeypatch.setattr(build.os, "geteuid", lambda: 1000)
    with pytest.raises(ImageError, match="needs root"):
        build.build_image(site, recipe, progress=lambda m: None)
    monkeypatch.setattr(build.shutil, "which", lambda tool: None)
    with pytest.raises(ImageError, match="mmdebstrap is not installed: run `make setup`"):
        build.build_image(site, recipe, progress=lambda m: None)


def vmjudge(*args, env=None):
    return run_cli(*args, env=env)


def test_cli_build_of_a_built_image_reports_it_at_once(site, image):
    proc = vmjudge("--home", str(site.home), "image", "build", "examples/minimal")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(image.directory)
    assert "up to date" in proc.stderr


def test_cli_build_force_rebuilds_a_built_image_in_its_place(image):
    """`image build --force` in a home of its own that holds a copy of the built image: the
    same recipe builds again (mmdebstrap and all) into the same key, and replaces the copy."""
    home = Path(tempfile.mkdtemp(prefix="vmjudge-force-", dir="/var/tmp"))
    try:
        copy = home / "images" / image.key
        shutil.copytree(image.directory, copy)
        before = json.loads((copy / "manifest.json").read_text())
        proc = vmjudge("--home", str(home), "image", "build", "--force", "examples/minimal")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == str(copy)
        assert "up to date" not in proc.stderr and "mmdebstrap" in proc.stderr
        assert f"image {image.key} built in " in proc.stderr
        after = json.loads((copy / "manifest.json").read_text())
        assert after["key"] == before["key"] and after["built_at"] != before["built_at"]
        assert (after["packages"], after["code"], after["kernel_version"]) == \
            (before["packages"], before["code"], before["kernel_version"])
        GuestImage.load(copy).verify()  # the rebuilt files match their new manifest
        assert list((home / "images").glob(".build-*")) == []
    finally:
        shutil.rmtree(home)


def test_cli_build_with_a_bad_challenge_says_why(site, tmp_path):
    (tmp_path / "challenge.toml").write_text('name = "x"\n[vm]\nvcpus = 0\n')
    proc = vmjudge("--home", str(site.home), "image", "build", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.startswith("vmjudge: ") and "[vm] vcpus = 0 is not allowed" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_stage_time_check_catches_an_altered_or_missing_file(image, tmp_path):
    copy = tmp_path / "img"
    copy.mkdir()
    for name in ("root.sqfs", "vmlinuz", "initrd.img", "manifest.json"):
        shutil.copy(image.directory / name, copy / name)
    img = GuestImage.load(copy)
    img.check()
    assert (copy / "verified.json").exists()
    img.check()  # unchanged files: passes again from the stamp
    with open(copy / "vmlinuz", "r+b") as f:
        f.seek(4096)
        byte = f.read(1)
        f.seek(4096)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(InfrastructureError) as err:
        img.check()
    assert err.value.reason == "image-altered" and "vmlinuz differs from its manifest" in str(err.value)
    (copy / "vmlinuz").unlink()
    with pytest.raises(InfrastructureError) as err:
        img.check()
    assert err.value.reason == "image-missing"


def test_concurrent_checks_of_a_new_image_do_not_collide(image, tmp_path, monkeypatch):
    """Two daemon slots verify a freshly built image at the same moment. A barrier before the
    rename holds both until both have written their stamp, the window where they collided."""
    import pathlib
    import threading

    copy = tmp_path / "img"
    copy.mkdir()
    for name in ("root.sqfs", "vmlinuz", "initrd.img", "manifest.json"):
        shutil.copy(image.directory / name, copy / name)
    img = GuestImage.load(copy)
    barrier = threading.Barrier(2, timeout=30)
    original = pathlib.Path.replace

    def replace_together(self, target):
        barrier.wait()
        return original(self, target)

    monkeypatch.setattr(pathlib.Path, "replace", replace_together)
    errors = []

    def check():
        try:
            img.check()
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=check) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and (copy / "verified.json").exists()
    assert [p.name for p in copy.iterdir() if p.name.endswith(".tmp")] == []
