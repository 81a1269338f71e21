"""The guest's root_layers.py on the host, with real files: what the agent (root) does in a command's
layers, whose contents after the command are the entry's. It makes mount points that no link of
the image's can lead elsewhere, and removes what a command wrote without following a link, within
its time, however deep. Run as the agent runs (the guest directory first on the path, -I -S) in
a process of its own, so that no guest module is imported into pytest's."""

from __future__ import annotations

from vmjudge.images import build

from .needs import guest_script_as_root

SCRIPT = '''
import json, os, stat, sys, time
sys.path.insert(0, sys.argv[1])
import root_layers
top = sys.argv[2]
os.chdir(top)
result = {}

# An image: /data a directory of uid 1234's, 0750, with a file; /output a link to /etc; /tmp a link to /.
os.makedirs("image/data"); os.chown("image/data", 1234, 1234); os.chmod("image/data", 0o750)
open("image/data/file", "w").close()
os.symlink("/etc", "image/output"); os.symlink("/", "image/tmp")
os.mkdir("upper")
upper, lower = os.open("upper", os.O_RDONLY), os.open("image", os.O_RDONLY)
for parts, mode in ((["tmp"], 0o1777), (["output"], 0o755), (["data", "in"], 0o755), (["a", "b"], 0o755)):
    root_layers.mount_point(upper, lower, parts, mode)
def seen(path):
    st = os.lstat(path)
    return [stat.filemode(st.st_mode), st.st_uid, root_layers.OPAQUE in os.listxattr(path, follow_symlinks=False)]
result["made"] = {p: seen("upper/" + p) for p in ("tmp", "output", "data", "data/in", "a", "a/b")}
result["etc untouched"] = not os.path.exists("/etc/in")

# What a command leaves: files, a link to a directory outside, a link to /, a FIFO, a locked
# directory, a deep tree.
os.makedirs("outside/keep"); open("outside/keep/x", "w").close()
os.makedirs("left/a/b")
for i in range(500):
    open(f"left/a/f{i}", "w").close()
os.symlink(os.path.abspath("outside"), "left/link"); os.symlink("/", "left/root"); os.mkfifo("left/fifo")
os.makedirs("left/locked/in"); os.chmod("left/locked", 0)
deep = "left/deep" + "/d" * 100
os.makedirs(deep)
here = os.open(".", os.O_RDONLY)
result["removed"] = root_layers.remove_tree(here, "left", time.monotonic() + 30)
result["gone"] = not os.path.lexists("left")
result["outside kept"] = os.listdir("outside/keep")
too_deep = "deeper" + "/d" * (root_layers.REMOVE_DEPTH + 5)
os.makedirs(too_deep)
result["too deep"] = [root_layers.remove_tree(here, "deeper", time.monotonic() + 30), os.path.isdir("deeper")]
os.mkdir("many")
for i in range(5000):
    open(f"many/f{i}", "w").close()
started = time.monotonic()
done = root_layers.remove_tree(here, "many", time.monotonic() + 0.02)
result["deadline"] = [done, time.monotonic() - started < 1.0, 0 < len(os.listdir("many")) < 5000]
print(json.dumps(result))
'''


def test_mount_points_hide_the_images_links_and_removal_follows_none(tmp_path):
    result = guest_script_as_root(SCRIPT, build.GUEST_DIR, tmp_path,
                                  "the agent's layers are made as root (owners, trusted.overlay xattrs)")
    # The mount points: root's, opaque, their own mode; on the way, an image's directory keeps its
    # owner and mode (and is not opaque: its files show), one it lacks is root's 0755.
    assert result["made"] == {"tmp": ["drwxrwxrwt", 0, True], "output": ["drwxr-xr-x", 0, True],
                              "data": ["drwxr-x---", 1234, False], "data/in": ["drwxr-xr-x", 0, True],
                              "a": ["drwxr-xr-x", 0, False], "a/b": ["drwxr-xr-x", 0, True]}
    assert result["etc untouched"]
    assert result["removed"] and result["gone"] and result["outside kept"] == ["x"]
    assert result["too deep"] == [False, True]  # left on the home disk, not followed down for ever
    assert result["deadline"] == [False, True, True]
