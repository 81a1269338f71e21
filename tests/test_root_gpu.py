"""A container entry's view of the GPU (guest/root_gpu.py, with root_layers.py and root_start.py),
on the host with a fake driver tree: no GPU is lent to the machines the project runs on, so no
VM of a GPU stage can run here. What is real: the guest's code, run as the agent runs it (its
directory first on the path, -I -S, in a process of its own), the kernel's overlayfs and bind
mounts in a mount namespace of that process's own, and device nodes. What is fake: the driver's
files (small files at the paths and with the links Debian's NVIDIA packages use), the guest's
ld.so.cache as `ldconfig -p` prints it, and the /dev gpu-init would have made.

Shown: the libraries are bound read-only at the image's library directory under their real names
with the toolkit's links (libcuda.so.1, libcuda.so), nvidia-smi at /usr/bin, the device nodes
with the guest's numbers; what the image had at those names is hidden, nothing is written in the
image, and a link of the image's (its library directory made a link to /etc) leads no bind
anywhere but the command's own layer."""

from __future__ import annotations

from vmjudge.images import build

from .needs import guest_script_as_root

SCRIPT = r'''
import json, os, stat, sys
sys.path.insert(0, sys.argv[1])
import root_gpu, root_layers, root_start, run_guard
top = sys.argv[2]
os.chdir(top)
libc = run_guard._libc()
result = {}
DRIVER = "usr/lib/x86_64-linux-gnu/nvidia/tesla-535"

# The guest: Debian's layout (real files under nvidia/tesla-535, the sonames linked to them).
os.makedirs(f"guest/{DRIVER}")
os.makedirs("guest/usr/lib/nvidia/tesla-535")
os.makedirs("guest/usr/bin")
for name, data in (("libcuda.so.535.216.03", b"CUDA DRIVER"), ("libnvidia-ml.so.535.216.03", b"NVML"),
                   ("libnvidia-ptxjitcompiler.so.535.216.03", b"PTXJIT")):
    with open(f"guest/{DRIVER}/{name}", "wb") as f:
        f.write(data)
    os.symlink(name, f"guest/{DRIVER}/" + name.split(".so.")[0] + ".so.1")
os.symlink("nvidia/tesla-535/libcuda.so.1", "guest/usr/lib/x86_64-linux-gnu/libcuda.so.1")
with open("guest/usr/lib/nvidia/tesla-535/nvidia-smi", "wb") as f:
    f.write(b"#!/bin/sh\necho smi\n")
os.chmod("guest/usr/lib/nvidia/tesla-535/nvidia-smi", 0o755)
os.symlink("../lib/nvidia/tesla-535/nvidia-smi", "guest/usr/bin/nvidia-smi")
cache = "\n".join([
    "5 libs found in cache `/etc/ld.so.cache'",
    "\tlibnvidia-ptxjitcompiler.so.1 (libc6,x86-64) => /" + DRIVER + "/libnvidia-ptxjitcompiler.so.1",
    "\tlibnvidia-ml.so.1 (libc6,x86-64) => /" + DRIVER + "/libnvidia-ml.so.1",
    "\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1",
    "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "\tlibz.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libz.so.1"])
os.mkdir("dev")
for name, major, minor in (("nvidiactl", 195, 255), ("nvidia0", 195, 0), ("nvidia-uvm", 235, 0),
                           ("nvidia-uvm-tools", 235, 1), ("nvidia-modeset", 195, 254)):
    os.mknod(f"dev/{name}", stat.S_IFCHR | 0o666, os.makedev(major, minor))
open("dev/nvidia1", "w").close()  # not a device: left out
view = root_gpu.find_view(root=os.path.abspath("guest"), dev="dev", cache=cache)
result["libraries"] = [[real, os.path.relpath(path, "guest"), soname] for real, path, soname in view.libraries]
result["programs"] = [[name, os.path.relpath(path, "guest")] for name, path in view.programs]
result["devices"] = view.devices


def root_of(name, image):
    """An image's tree made by `image`, its command's layers, the overlay mounted, the GPU given."""
    os.makedirs(f"{name}/image")
    image(f"{name}/image")
    for part in ("upper", "work", "merged"):
        os.mkdir(f"{name}/{part}")
    upper, lower = os.open(f"{name}/upper", os.O_RDONLY), os.open(f"{name}/image", os.O_RDONLY)
    root_layers.mount_point(upper, lower, ["dev"], 0o755)
    libdir = view.libdir(lower)
    binds = view.binds(libdir)
    for parts, _ in binds:
        root_layers.mount_point(upper, lower, parts, 0o644, last="file")
    for parts, target in view.links(libdir):
        root_layers.mount_point(upper, lower, parts, 0o777, last=target)
    merged = os.path.abspath(f"{name}/merged")
    root_start._mount(libc, b"overlay", merged, b"overlay", 0,
                      f"lowerdir={os.path.abspath(name + '/image')},upperdir={os.path.abspath(name + '/upper')},"
                      f"workdir={os.path.abspath(name + '/work')},{root_start.OVERLAY_OPTIONS}", "overlay")
    root_start._dev(libc, merged, view.devices)
    root_start.gpu_binds(libc, merged, binds)
    return merged, "/".join(libdir)


def seen(merged, libdir):
    out = {}
    for name in ("libcuda.so.535.216.03", "libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1",
                 "libnvidia-ptxjitcompiler.so.1", "libimage.so"):
        path = f"{merged}/{libdir}/{name}"
        out[name] = [os.readlink(path) if os.path.islink(path) else None,
                     open(path, "rb").read().decode() if os.path.exists(path) else None]
    with open(f"{merged}/usr/bin/nvidia-smi", "rb") as f:
        out["nvidia-smi"] = f.read().decode()
    nodes = {n: os.stat(f"{merged}/dev/{n}").st_rdev for n in os.listdir(f"{merged}/dev") if n.startswith("nvidia")}
    out["devices"] = sorted([n, os.major(rdev), os.minor(rdev)] for n, rdev in nodes.items())
    try:
        with open(f"{merged}/{libdir}/libcuda.so.535.216.03", "ab") as f:
            f.write(b"x")
        out["writable"] = True
    except OSError as exc:
        out["writable"] = exc.strerror
    return out


libc.unshare(root_start.CLONE_NEWNS)
libc.mount(None, b"/", None, root_start.MS_REC | root_start.MS_PRIVATE, None)


def debian(image):
    os.makedirs(f"{image}/usr/lib/x86_64-linux-gnu")
    os.makedirs(f"{image}/usr/bin")
    with open(f"{image}/usr/lib/x86_64-linux-gnu/libcuda.so.1", "wb") as f:
        f.write(b"STALE STUB")  # an image's own copy, which the driver's must hide
    with open(f"{image}/usr/lib/x86_64-linux-gnu/libimage.so", "wb") as f:
        f.write(b"IMAGE")
merged, libdir = root_of("debian", debian)
result["debian"] = {"libdir": libdir, **seen(merged, libdir)}
image_lib = "debian/image/usr/lib/x86_64-linux-gnu"
result["debian image untouched"] = sorted(os.listdir(image_lib)) == ["libcuda.so.1", "libimage.so"] and \
    open(f"{image_lib}/libcuda.so.1").read() == "STALE STUB"


def ubi(image):
    os.makedirs(f"{image}/usr/lib64")
    os.makedirs(f"{image}/usr/bin")
merged, libdir = root_of("ubi", ubi)
result["ubi"] = {"libdir": libdir, "libcuda": open(f"{merged}/usr/lib64/libcuda.so.1").read()}


def hostile(image):
    os.makedirs(f"{image}/usr/lib")
    os.makedirs(f"{image}/etc")
    os.symlink("/etc", f"{image}/usr/lib/x86_64-linux-gnu")  # the library directory leads to /etc
    os.symlink("/etc", f"{image}/usr/bin")
merged, libdir = root_of("hostile", hostile)
result["hostile"] = {"libdir": libdir, "is a link": os.path.islink(f"{merged}/usr/lib/x86_64-linux-gnu"),
                     "libcuda": open(f"{merged}/usr/lib/x86_64-linux-gnu/libcuda.so.1").read(),
                     "image etc": os.listdir("hostile/image/etc"),
                     "host etc has no libcuda": not os.path.exists("/etc/libcuda.so.1")}
print(json.dumps(result))
'''


def test_the_gpu_is_shown_to_a_container_as_the_toolkit_shows_it(tmp_path):
    result = guest_script_as_root(SCRIPT, build.GUEST_DIR, tmp_path,
                                  "the agent's mounts and device nodes are made as root")
    driver = "usr/lib/x86_64-linux-gnu/nvidia/tesla-535"
    # Found through the guest's cache (x86-64 only, the first listing of each soname), to the real files.
    assert result["libraries"] == [["libcuda.so.535.216.03", f"{driver}/libcuda.so.535.216.03", "libcuda.so.1"],
                                   ["libnvidia-ml.so.535.216.03", f"{driver}/libnvidia-ml.so.535.216.03",
                                    "libnvidia-ml.so.1"],
                                   ["libnvidia-ptxjitcompiler.so.535.216.03",
                                    f"{driver}/libnvidia-ptxjitcompiler.so.535.216.03",
                                    "libnvidia-ptxjitcompiler.so.1"]]
    assert result["programs"] == [["nvidia-smi", "usr/lib/nvidia/tesla-535/nvidia-smi"]]
    assert result["devices"] == [["nvidia-uvm", 235, 0], ["nvidia-uvm-tools", 235, 1], ["nvidia0", 195, 0],
                                 ["nvidiactl", 195, 255]]
    debian = result["debian"]
    assert debian["libdir"] == "usr/lib/x86_64-linux-gnu"
    assert debian["libcuda.so.535.216.03"] == [None, "CUDA DRIVER"]
    assert debian["libcuda.so.1"] == ["libcuda.so.535.216.03", "CUDA DRIVER"]  # the image's stub hidden
    assert debian["libcuda.so"] == ["libcuda.so.1", "CUDA DRIVER"]
    assert debian["libnvidia-ml.so.1"] == ["libnvidia-ml.so.535.216.03", "NVML"]
    assert debian["libnvidia-ptxjitcompiler.so.1"][1] == "PTXJIT"
    assert debian["libimage.so"] == [None, "IMAGE"]  # the image's own files stay
    assert debian["nvidia-smi"] == "#!/bin/sh\necho smi\n"
    assert debian["devices"] == [["nvidia-uvm", 235, 0], ["nvidia-uvm-tools", 235, 1], ["nvidia0", 195, 0],
                                 ["nvidiactl", 195, 255]]
    assert debian["writable"] == "Read-only file system"
    assert result["debian image untouched"]
    assert result["ubi"] == {"libdir": "usr/lib64", "libcuda": "CUDA DRIVER"}
    assert result["hostile"] == {"libdir": "usr/lib/x86_64-linux-gnu", "is a link": False, "libcuda": "CUDA DRIVER",
                                 "image etc": [], "host etc has no libcuda": True}
