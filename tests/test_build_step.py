"""The challenge's build script (#13), run for real in a small root made of the host's static
busybox: namespaces, the read-only image/ directory, the scratch /tmp, no network, the time
limit and the failure sentence. Host only; the whole image build is in test_image_build.py."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from vmjudge.config import ImageRecipe
from vmjudge.errors import ImageError
from vmjudge.images import build_step

from .needs import cannot_run

BUSYBOX = shutil.which("busybox")


@pytest.fixture(autouse=True)
def root_and_busybox():
    if os.geteuid() != 0 or BUSYBOX is None:
        cannot_run("needs root and busybox-static (make setup installs it)")


def busybox_root(base: Path) -> Path:
    root = base / "root"
    for d in ("bin", "usr/bin", "usr/local/bin", "proc", "dev/shm", "tmp", "run", "root", "etc"):
        (root / d).mkdir(parents=True)
    shutil.copy(str(BUSYBOX), root / "bin" / "busybox")
    for applet in subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split():
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")
    (root / "usr/bin/env").symlink_to("/bin/busybox")
    subprocess.run(["mknod", "-m", "666", str(root / "dev/null"), "c", "1", "3"], check=True)
    return root


def recipe_with(base: Path, script: str, files: dict[str, str] | None = None, timeout: float = 60) -> ImageRecipe:
    image = base / "image"
    image.mkdir()
    (image / "build.sh").write_text(script)
    for name, text in (files or {}).items():
        (image / name).parent.mkdir(parents=True, exist_ok=True)
        (image / name).write_text(text)
    return ImageRecipe(build="image/build.sh", build_dir=image, build_timeout=timeout)


def build(root: Path, recipe: ImageRecipe, base: Path, progress) -> dict:
    """run_build as the image build calls it: with the tree hash the image's key was made from."""
    return build_step.run_build(root, recipe, build_step.tree_hash(recipe.build_dir), base / "scratch", progress)


def mounts() -> str:
    return Path("/proc/self/mounts").read_text()


def test_the_script_installs_from_image_dir_and_leaves_no_build_tree(tmp_path):
    root = busybox_root(tmp_path)
    recipe = recipe_with(tmp_path, """set -e
echo "building in $(pwd) as $(id -u), TMPDIR=$TMPDIR"
cp -r "$VMJUDGE_BUILD_DIR/src" /tmp/src
echo object > /tmp/src/tool.o
cp /tmp/src/tool.sh /usr/local/bin/tool && chmod 755 /usr/local/bin/tool
if touch /run/vmjudge-build/written 2>/dev/null; then echo "image/ was writable"; exit 9; fi
echo done
""", {"src/tool.sh": "#!/bin/sh\necho tool 1.0\n"})
    said: list[str] = []
    result = build(root, recipe, tmp_path, said.append)
    assert said[0] == "    | building in /run/vmjudge-build as 0, TMPDIR=/tmp" and said[-1] == "    | done"
    assert result["installed"] == ["/usr/local/bin/tool"] and result["installed_count"] == 1
    assert (root / "usr/local/bin/tool").read_text() == "#!/bin/sh\necho tool 1.0\n"
    assert result["script"] == "image/build.sh" and result["tree_sha256"] == build_step.tree_hash(recipe.build_dir)
    # The build tree was in the scratch /tmp, deleted with the build; none of it in the root.
    assert list((root / "tmp").iterdir()) == [] and not (root / "run/vmjudge-build").exists()
    assert not (tmp_path / "scratch").exists()
    assert not (recipe.build_dir / "written").exists()
    assert str(root) not in mounts() and str(recipe.build_dir) not in mounts()  # the namespace took its mounts along


def test_the_build_has_no_network_even_where_the_host_has(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        # The host reaches it...
        subprocess.run([str(BUSYBOX), "wget", "-q", "-O", "/dev/null", url], check=True, timeout=30)
        root = busybox_root(tmp_path)
        recipe = recipe_with(tmp_path, f"echo fetching the sources\nwget -O /tmp/src.tar.gz {url}\n")
        with pytest.raises(ImageError) as err:
            build(root, recipe, tmp_path, lambda line: None)
    finally:
        server.shutdown()
    text = str(err.value)
    assert text.startswith("the build script image/build.sh failed (exit 1) after ")
    assert "without network" in text and "ship what it needs under image/" in text
    last = text.split("Its last lines:\n", 1)[1].splitlines()
    assert last[0] == "fetching the sources" and "Network is unreachable" in last[-1]


def test_out_of_time_ends_the_script_and_all_it_started(tmp_path):
    root = busybox_root(tmp_path)
    marker = "7919"  # a sleep nobody else runs
    recipe = recipe_with(tmp_path, f"echo started\nsleep {marker} &\nsleep {marker}\n", timeout=2)
    with pytest.raises(ImageError) as err:
        build(root, recipe, tmp_path, lambda line: None)
    assert "image/build.sh did not finish within 2 s" in str(err.value)
    assert str(err.value).endswith("Its last lines:\nstarted")
    assert not (tmp_path / "scratch").exists() and not (root / "run/vmjudge-build").exists()
    left = [p for p in Path("/proc").glob("[0-9]*")
            if _cmdline(p) == ["sleep", marker]]
    assert left == []
    assert str(root) not in mounts()


def _cmdline(proc: Path) -> list[str]:
    try:
        return (proc / "cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def test_a_failure_ends_with_the_last_twenty_lines(tmp_path):
    root = busybox_root(tmp_path)
    recipe = recipe_with(tmp_path, "i=1; while [ $i -le 100 ]; do echo line $i; i=$((i+1)); done; exit 3\n")
    with pytest.raises(ImageError) as err:
        build(root, recipe, tmp_path, lambda line: None)
    assert " failed (exit 3) after " in str(err.value)
    assert str(err.value).split("Its last lines:\n", 1)[1] == "\n".join(f"line {i}" for i in range(81, 101))


def test_an_executable_script_runs_by_its_own_interpreter(tmp_path):
    root = busybox_root(tmp_path)
    recipe = recipe_with(tmp_path, "#!/bin/busybox ash\necho \"$0 by ash\"\n")
    os.chmod(recipe.build_dir / "build.sh", 0o755)
    said: list[str] = []
    build(root, recipe, tmp_path, said.append)
    assert said == ["    | /run/vmjudge-build/build.sh by ash"]


def test_image_dir_changed_since_the_key_was_made_fails_the_build(tmp_path):
    root = busybox_root(tmp_path)
    recipe = recipe_with(tmp_path, "cp /run/vmjudge-build/src.c /usr/local/bin/src.c\n", {"src.c": "int x;\n"})
    keyed = build_step.tree_hash(recipe.build_dir)
    (recipe.build_dir / "src.c").write_text("int y;\n")  # as if edited while the image was building
    with pytest.raises(ImageError, match=r"image changed while the image was being built, so the image would "
                                         r"not be the one its key names: build it again"):
        build_step.run_build(root, recipe, keyed, tmp_path / "scratch", lambda line: None)
    assert not (tmp_path / "scratch").exists()


@pytest.mark.parametrize("known", [False, True], ids=["read-whole", "with-known-hashes"])
def test_tree_hash_follows_content_paths_and_the_x_bit_not_times(tmp_path, known):
    hashes = tmp_path / "known" / "tree.json" if known else None
    tree = tmp_path / "image"
    (tree / "src").mkdir(parents=True)
    (tree / "src/a.c").write_bytes(b"int main(void) { return 0; }\n")
    (tree / "build.sh").write_text("make\n")
    first = build_step.tree_hash(tree, hashes)
    os.utime(tree / "src/a.c", (0, 0))
    os.chmod(tree / "src/a.c", 0o600)
    assert build_step.tree_hash(tree, hashes) == first
    (tree / "src/a.c").write_bytes(b"int main(void) { return 1; }\n")  # one byte
    assert build_step.tree_hash(tree, hashes) != first
    (tree / "src/a.c").write_bytes(b"int main(void) { return 0; }\n")
    assert build_step.tree_hash(tree, hashes) == first
    os.chmod(tree / "build.sh", 0o755)
    assert build_step.tree_hash(tree, hashes) != first
    os.chmod(tree / "build.sh", 0o644)
    (tree / "src/a.c").rename(tree / "src/b.c")
    assert build_step.tree_hash(tree, hashes) != first
    os.mkfifo(tree / "pipe")
    with pytest.raises(ImageError, match="neither a file, a directory nor a symbolic link"):
        build_step.tree_hash(tree, hashes)


def test_known_hashes_spare_reading_unchanged_files_and_miss_no_rewrite(tmp_path, monkeypatch):
    """Every VM stage finds its image by this key: a file whose inode, size, mtime and ctime are
    unchanged is not read again; one rewritten to the same size with its mtime put back still is
    (its ctime moved), as is every file when the known hashes are damaged."""
    tree, known = tmp_path / "image", tmp_path / "trees" / "image.json"
    (tree / "weights").mkdir(parents=True)
    for i in range(3):
        (tree / f"weights/w{i}.bin").write_bytes(bytes([i]) * 4096)
    read: list[str] = []
    real = build_step.sha256_file
    monkeypatch.setattr(build_step, "sha256_file", lambda path: read.append(Path(path).name) or real(path))
    first = build_step.tree_hash(tree, known)
    assert sorted(read) == ["w0.bin", "w1.bin", "w2.bin"]
    read.clear()
    assert build_step.tree_hash(tree, known) == first and read == []
    st = (tree / "weights/w1.bin").stat()
    (tree / "weights/w1.bin").write_bytes(b"x" * 4096)  # same size, mtime put back
    os.utime(tree / "weights/w1.bin", ns=(st.st_atime_ns, st.st_mtime_ns))
    changed = build_step.tree_hash(tree, known)
    assert changed != first and read == ["w1.bin"] and changed == build_step.tree_hash(tree)
    read.clear()
    known.write_text("{not json")
    assert build_step.tree_hash(tree, known) == changed and sorted(read) == ["w0.bin", "w1.bin", "w2.bin"]


def test_links_are_hashed_not_followed_and_a_read_error_is_a_sentence(tmp_path):
    tree = tmp_path / "image"
    tree.mkdir()
    (tree / "build.sh").write_text("make\n")
    os.symlink("loop", tree / "loop")  # a link to itself: followed, it would fail
    os.symlink("/etc/passwd", tree / "outside")  # followed, the host's file would be in the key
    first = build_step.tree_hash(tree)
    (tree / "outside").unlink()
    os.symlink("/etc/group", tree / "outside")
    assert build_step.tree_hash(tree) != first
    # Root reads whatever the modes say, so the error is provoked by a directory that is gone.
    with pytest.raises(ImageError, match=r"no-image cannot be read \(No such file or directory\): the image's key"):
        build_step.tree_hash(tmp_path / "no-image")
