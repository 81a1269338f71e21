"""`vmjudge image export` / `image import` (#15): a built image moved to a second home arrives
with the same bits, and an import takes nothing but an export's regular files whose bytes match
the manifest, leaving nothing behind when it refuses.

No VM and no real build: the image is a small stand-in whose manifest has exactly the fields
and format build.py writes, and whose key is the one build.py computes for the recipe."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from vmjudge.config import ImageRecipe, Site, load_challenge, load_site
from vmjudge.errors import ImageError
from vmjudge.files import sha256_file
from vmjudge.images import build, tar_format
from vmjudge.images.guest import frames
from vmjudge.images.image import FILES, GuestImage
from vmjudge.images.transfer import export_image, import_image

from .cli import QUICK_TIMEOUT, run_cli

MEMBERS = ["manifest.json", "root.sqfs", "vmlinuz", "initrd.img"]


def home(path: Path, site_toml: str = "") -> Site:
    path.mkdir(parents=True, exist_ok=True)
    if site_toml:
        (path / "site.toml").write_text(site_toml)
    site = load_site(path)
    site.layout.ensure()
    return site


def challenge(path: Path, image: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "challenge.toml").write_text(f'name = "{path.name}"\n[image]\n{image}')
    return path


def fake_image(site: Site, challenge_dir: Path, root: bytes = b"hsqs" + bytes(range(256)) * 20,
               recipe: ImageRecipe | None = None) -> GuestImage:
    """HOME/images/<key>/ as build_image leaves it: the three files, 0644, and manifest.json in
    build.py's format (indent 2, sorted keys, the key and build time added last); of `recipe`,
    by default the challenge's [image]."""
    recipe = recipe if recipe is not None else load_challenge(challenge_dir).image
    doc = build.recipe_document(site, recipe)
    key = build.image_key(site, recipe)
    directory = site.layout.images / key
    directory.mkdir()
    for name, data in (("root.sqfs", root), ("vmlinuz", b"MZ kernel " * 10), ("initrd.img", b"\x1f\x8b initrd" * 20)):
        (directory / name).write_bytes(data)
    manifest = {
        "recipe": {"packages": list(recipe.packages), "pip": list(recipe.pip),
                   "components": list(recipe.components), "build": recipe.build},
        "build": None, "suite": site.suite, "sources": doc["sources"], "code": doc["code"],
        "packages": {"python3": "3.11.2-1+b1", "linux-image-amd64": "6.1.129-1"}, "pip_packages": [],
        "kernel_version": "6.1.0-32-amd64", "initramfs_modules": ["kernel/drivers/char/virtio_console.ko"],
        "agent_version": build.agent_version(), "protocol": frames.PROTOCOL,
        "sha256": {name: sha256_file(directory / name) for name in FILES},
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "key": key, "build_seconds": 41.3,
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    for name in FILES + ("manifest.json",):
        os.chmod(directory / name, 0o644)
    os.chmod(directory, 0o755)
    return GuestImage.load(directory)


@pytest.fixture
def two_homes(tmp_path):
    """An image built on the first host (and checked there, so it has its host-local verified.json),
    exported to a file; a second, empty home; the challenge directory both use."""
    ch = challenge(tmp_path / "minimal")
    first, second = home(tmp_path / "judge1"), home(tmp_path / "judge2")
    image = fake_image(first, ch)
    image.check()
    assert (image.directory / "verified.json").exists()
    export = tmp_path / "image.tar"
    export_image(first, load_challenge(ch), export)
    return first, second, ch, image, export


def members_of(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers()}


def write_tar(path: Path, members: list[tuple[str, bytes] | tarfile.TarInfo]) -> Path:
    """A tar as another tool would write it (tarfile, GNU format): regular files from (name, bytes),
    anything else from a TarInfo."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tf.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size, info.mode = len(member[1]), 0o644
                tf.addfile(info, io.BytesIO(member[1]))
    return path


def left_in(site: Site) -> list[str]:
    return sorted(os.listdir(site.layout.images))


def test_export_then_import_on_a_second_home_gives_the_same_image(two_homes):
    first, second, ch, image, export = two_homes
    assert list(members_of(export)) == MEMBERS  # the manifest first; no verified.json, no lock file
    done = import_image(second, export, load_challenge(ch))
    assert not done.already_there and done.key == image.key
    found = build.find_image(second, load_challenge(ch).image)
    assert found.directory == second.layout.images / image.key == done.path
    found.verify()
    found.check()
    for name in MEMBERS:
        assert sha256_file(found.directory / name) == sha256_file(image.directory / name) == done.sha256[name]
        assert stat.S_IMODE((found.directory / name).stat().st_mode) == 0o644  # libvirt's qemu reads them
    assert stat.S_IMODE(found.directory.stat().st_mode) == 0o755
    assert left_in(second) == [f".{image.key}.lock", image.key]  # no .import-* directory
    assert sorted(os.listdir(found.directory)) == sorted(MEMBERS + ["verified.json"])  # the check's own, made here


def test_the_export_is_a_plain_tar_that_tar_lists_and_is_written_whole(two_homes, tmp_path):
    first, _, ch, image, export = two_homes
    with tarfile.open(export) as tf:
        infos = tf.getmembers()
    assert all(i.isreg() and i.mode == 0o644 and i.uid == 0 for i in infos)
    assert {i.name: i.size for i in infos} == {n: (image.directory / n).stat().st_size for n in MEMBERS}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no .part left
    again = tmp_path / "again.tar"
    done = export_image(first, load_challenge(ch), again)
    assert done.sha256 == {n: sha256_file(image.directory / n) for n in MEMBERS}
    assert stat.S_IMODE(again.stat().st_mode) == 0o644


def test_exporting_an_image_not_built_here_is_refused_in_one_sentence(tmp_path):
    ch = challenge(tmp_path / "minimal")
    site = home(tmp_path / "judge1")
    out = tmp_path / "out" / "image.tar"
    out.parent.mkdir()
    with pytest.raises(ImageError) as err:
        export_image(site, load_challenge(ch), out)
    assert str(err.value) == ("the guest image of minimal is not built on this host, so there is nothing to export: "
                              f"run `vmjudge image build {ch}` first.")
    assert list(out.parent.iterdir()) == []


def test_an_altered_image_is_not_exported(tmp_path):
    ch = challenge(tmp_path / "minimal")
    site = home(tmp_path / "judge1")
    image = fake_image(site, ch)
    (image.directory / "vmlinuz").write_bytes(b"another kernel")
    out = tmp_path / "out" / "image.tar"
    out.parent.mkdir()
    with pytest.raises(ImageError, match=r"vmlinuz differs from its manifest .*: delete .* and build the image again"):
        export_image(site, load_challenge(ch), out)
    assert list(out.parent.iterdir()) == []


def bad_exports(good: dict[str, bytes]) -> dict[str, tuple[list, str]]:
    """Each kind of file an import must refuse, built from the good export's members, with the words
    its refusal must say."""
    m = json.loads(good["manifest.json"])
    files = [(n, good[n]) for n in MEMBERS]

    def link(kind: bytes, name: str = "root.sqfs") -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, "/etc/shadow"
        return info

    def manifest(**change) -> list:
        return [("manifest.json", json.dumps({**m, **change}).encode()), *files[1:]]

    return {
        "a path": ([*files[:1], ("images/root.sqfs", good["root.sqfs"]), *files[2:]], "member 'images/root.sqfs' "
                   "has a path"),
        "dot-dot": ([*files, ("../root.sqfs", b"x")], "member '../root.sqfs' has a path"),
        "absolute": ([*files, ("/etc/cron.d/x", b"x")], "member '/etc/cron.d/x' has a path"),
        "a symlink": ([*files[:1], link(tarfile.SYMTYPE), *files[2:]], "member 'root.sqfs' is a symbolic link"),
        "a hard link": ([*files[:1], link(tarfile.LNKTYPE), *files[2:]], "member 'root.sqfs' is a hard link"),
        "a device": ([*files, link(tarfile.CHRTYPE, "vmlinuz")], "member 'vmlinuz' is a character device"),
        "a directory": ([link(tarfile.DIRTYPE, "root.sqfs"), *files], "member 'root.sqfs/' is a directory"),
        "an extra file": ([*files, ("verified.json", b"{}")], "member 'verified.json' is not one of the image's files"),
        "a file twice": ([*files, ("vmlinuz", good["vmlinuz"])], "it holds vmlinuz twice"),
        "a missing file": ([f for f in files if f[0] != "vmlinuz"], "lacks vmlinuz"),
        "other bytes": ([*files[:1], ("root.sqfs", good["root.sqfs"][:-1] + b"!"), *files[2:]],
                        "root.sqfs differs from its manifest"),
        "a manifest pinning other bytes": (
            manifest(sha256={**m["sha256"], "initrd.img": "0" * 64}), "initrd.img differs from its manifest"),
        "a key that is a path": (manifest(key="../../../etc/x"), "names no image key"),
        "no key": ([("manifest.json", b'{"sha256": {}}'), *files[1:]], "names no image key"),
        "a manifest that is not JSON": ([("manifest.json", b"\x00{"), *files[1:]], "manifest.json is not JSON"),
        "a manifest pinning too little": (manifest(sha256={"root.sqfs": m["sha256"]["root.sqfs"]}),
                                          "does not pin a sha256 for exactly root.sqfs, vmlinuz, initrd.img"),
    }


@pytest.mark.parametrize("case", list(bad_exports({"manifest.json": b'{"sha256": {"root.sqfs": ""}}',
                                                   "root.sqfs": b"", "vmlinuz": b"", "initrd.img": b""})))
def test_an_import_refuses_anything_but_the_exports_files_and_leaves_nothing(two_homes, tmp_path, case):
    _, second, ch, _, export = two_homes
    members, words = bad_exports(members_of(export))[case]
    bad = write_tar(tmp_path / "bad.tar", members)
    with pytest.raises(ImageError) as err:
        import_image(second, bad, load_challenge(ch))
    assert words in str(err.value)
    assert left_in(second) == []
    with pytest.raises(ImageError, match="is not built"):
        build.find_image(second, load_challenge(ch).image)


def cut(export: Path, to: Path, size: int) -> Path:
    to.write_bytes(export.read_bytes()[:size])
    return to


def test_a_truncated_or_padded_or_compressed_export_is_refused_and_leaves_nothing(two_homes, tmp_path):
    _, second, _, image, export = two_homes
    data = export.read_bytes()
    root_at = data.index(b"root.sqfs\0")
    ends = len(data) - 1024  # the export ends with the two zero blocks of the end-of-archive marker
    assert data[ends:] == bytes(1024) and ends % 512 == 0
    cases = {
        "inside root.sqfs": (cut(export, tmp_path / "a.tar", root_at + 512 + 1000),
                             "ends inside root.sqfs (1000 of its 5124 bytes): the copy is truncated"),
        "before the end marker": (cut(export, tmp_path / "b.tar", ends), "ends before its end-of-archive marker"),
        "inside a header": (cut(export, tmp_path / "c.tar", root_at + 100), "ends inside a header"),
        "empty": (cut(export, tmp_path / "d.tar", 0), "ends before its end-of-archive marker"),
    }
    (tmp_path / "e.tar").write_bytes(data + b"\0" * 512 + b"a second tar")
    cases["something after the end"] = (tmp_path / "e.tar", "something other than zeros follows")
    (tmp_path / "f.tar.gz").write_bytes(b"\x1f\x8b\x08\x00" + data[:100])
    cases["compressed"] = (tmp_path / "f.tar.gz", "is gzip-compressed")
    (tmp_path / "g.tar").write_bytes(b"not a tar at all".ljust(1024, b"."))
    cases["not a tar"] = (tmp_path / "g.tar", "a header's checksum is wrong")
    for case, (path, words) in cases.items():
        with pytest.raises(ImageError) as err:
            import_image(second, path)
        assert words in str(err.value), case
        assert left_in(second) == [], case


def test_a_member_larger_than_an_image_file_may_be_is_refused_before_its_bytes_are_read(two_homes, tmp_path):
    _, second, _, _, export = two_homes
    good = members_of(export)
    bad = tmp_path / "huge.tar"
    with open(bad, "wb") as f:
        w = tar_format.TarWriter(f)
        w.add("manifest.json", io.BytesIO(good["manifest.json"]), len(good["manifest.json"]), 0)
        f.write(tar_format._header("root.sqfs", 65 << 30, 0))  # 65 GiB announced, none of it there
    with pytest.raises(ImageError, match=r"its root.sqfs is 69793218560 bytes, more than an image's root.sqfs may"):
        import_image(second, bad)
    assert left_in(second) == []


def test_importing_the_same_image_again_says_so_and_a_different_one_is_refused(two_homes, tmp_path):
    first, second, ch, image, export = two_homes
    import_image(second, export)
    again = import_image(second, export)
    assert again.already_there
    assert list(again.sha256.items()) == [(n, sha256_file(image.directory / n)) for n in MEMBERS]  # export's order
    other = home(tmp_path / "judge3")
    rebuilt = b"hsqs another build of the same recipe"
    fake_image(other, ch, root=rebuilt)
    listing = left_in(other)
    with pytest.raises(ImageError) as err:
        import_image(other, export)
    assert str(err.value).startswith(f"{other.layout.images / image.key} holds another build of image {image.key} "
                                     "(root.sqfs differs: sha256 ")
    assert "every host must judge with the same bits: remove" in str(err.value)
    assert left_in(other) == listing
    assert GuestImage.load(other.layout.images / image.key).root.read_bytes() == rebuilt


def test_import_with_challenge_says_which_setting_makes_the_keys_differ(two_homes, tmp_path):
    _, _, ch, image, export = two_homes
    mirror = home(tmp_path / "judge4", '[image]\nmirror = "http://mirror.example.org/debian"\n')
    with pytest.raises(ImageError) as err:
        import_image(mirror, export, load_challenge(ch))
    want = build.image_key(mirror, load_challenge(ch).image)
    assert str(err.value) == (
        f"{export} holds image {image.key}, but this host's image for minimal is {want}: the Debian sources differ "
        "(\"deb http://mirror.example.org/debian bookworm main\" here, \"deb http://deb.debian.org/debian bookworm "
        "main\" in the image): give site.toml's [image] mirror, security_mirror and suite the same values on both "
        "hosts; nothing was imported.")
    assert left_in(mirror) == []
    numpy = challenge(tmp_path / "other" / "minimal", 'packages = ["python3-numpy"]\n')
    with pytest.raises(ImageError, match=r"\[image\] packages differ \(only here: python3-numpy; only in the image: "
                                         r"none\): use the same challenge directory on both hosts; nothing was"):
        import_image(home(tmp_path / "judge5"), export, load_challenge(numpy))
    import_image(mirror, export)  # without --challenge the key is not compared


def test_the_commands_exit_0_on_success_and_1_with_a_sentence(two_homes, tmp_path):
    first, _, ch, image, _ = two_homes
    out = tmp_path / "cli.tar"
    done = run_cli("image", "export", str(ch), "-o", str(out), home=first.home, timeout=QUICK_TIMEOUT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"image {image.key} exported to {out} (")
    assert lines[1:] == [f"{sha256_file(image.directory / n)}  {n}" for n in MEMBERS]
    second = tmp_path / "cli-home"
    done = run_cli("image", "import", str(out), "--challenge", str(ch), home=second, timeout=QUICK_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"image {image.key} imported: {second / 'images' / image.key}"
    assert done.stdout.splitlines()[1:] == lines[1:]
    done = run_cli("image", "import", str(out), home=second, timeout=QUICK_TIMEOUT)
    assert done.returncode == 0 and "is already here with the same sha256s" in done.stdout
    cut(out, tmp_path / "short.tar", 2000)
    done = run_cli("image", "import", str(tmp_path / "short.tar"), home=tmp_path / "h3", timeout=QUICK_TIMEOUT)
    assert done.returncode == 1 and done.stderr.startswith("vmjudge: ") and "truncated" in done.stderr
    unbuilt = challenge(tmp_path / "unbuilt", 'packages = ["gcc"]\n')
    done = run_cli("image", "export", str(unbuilt), "-o", str(tmp_path / "x.tar"), home=first.home,
                   timeout=QUICK_TIMEOUT)
    assert (done.returncode, done.stderr) == (1, "vmjudge: the guest image of unbuilt is not built on this host, so "
                                                 f"there is nothing to export: run `vmjudge image build {unbuilt}` "
                                                 "first.\n")
    assert not (tmp_path / "x.tar").exists()


@pytest.mark.parametrize("fmt", ["gnu", "ustar", "oldgnu"])
def test_the_same_files_tarred_by_gnu_tar_import_too(two_homes, tmp_path, fmt):
    """The format is plain tar, not a private one: an organiser's own `tar -cf` of the image
    directory's four files is read alike (pax headers, which tarfile would obey, are not)."""
    _, second, _, image, _ = two_homes
    made = tmp_path / f"{fmt}.tar"
    subprocess.run(["tar", f"--format={fmt}", "-cf", str(made), "-C", str(image.directory), *MEMBERS], check=True)
    assert import_image(second, made).sha256["root.sqfs"] == image.manifest["sha256"]["root.sqfs"]


def test_a_root_over_8_gib_takes_a_base_256_size_that_tar_reads_too():
    header = tar_format._header("root.sqfs", 9 << 30, 0)
    assert tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape").size == 9 << 30
    assert tar_format._parse(header, Path("x.tar"), {"root.sqfs": 64 << 30}) == ("root.sqfs", 9 << 30)
