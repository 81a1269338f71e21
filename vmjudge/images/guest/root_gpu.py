"""The GPU as a CUDA container expects to find it, for a container entry's command on a GPU stage
(the job says "gpu": true, which the agent runs only once it has found the card working): what the
NVIDIA container toolkit (libnvidia-container) gives a container with the "compute" and "utility"
capabilities, so that an image based on nvidia/cuda runs unmodified.

- The driver's user-space libraries, from the guest's own driver packages (the GPU image's), each
  bound read-only at the image's library directory under its real name (libcuda.so.535.216.03),
  with the links the toolkit makes beside it: its soname (libcuda.so.1) and, for libcuda, the
  development name libcuda.so. The library directory is /usr/lib/x86_64-linux-gnu (Debian and
  Ubuntu, where it is a system search path: no ld.so.cache is needed), or /usr/lib64 when the image
  has that and not the other (Red Hat's UBI).
- The driver's programs (nvidia-smi and the others the toolkit mounts), bound read-only at
  /usr/bin/NAME.
- The device nodes: nvidiactl, nvidiaN, nvidia-uvm and nvidia-uvm-tools, made in the command's
  own /dev with the guest's numbers (gpu-init made the guest's from the loaded driver).

Everything is found in the guest, whose files are the judge's: the libraries through the guest's
own ld.so.cache (`ldconfig -p`), followed to their real files by the guest's links; nothing of
the image is read but whether its library directories are directories (lstat, no link followed),
and the mount points are made by root_layers.py in the command's new upper layer, where no link
of the image's can lead a mount elsewhere. Every path is an argument, so that the host's tests
can point it at a fake driver tree (no GPU is lent to the machines the project runs on).
"""

import os
import stat
import subprocess

# Sonames and programs the toolkit mounts for "compute" and "utility" (libnvidia-container's lists).
LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4",
             "libcudadebugger.so.1", "libnvidia-opencl.so.1", "libnvidia-cfg.so.1")
DEV_LINKS = {"libcuda.so.1": "libcuda.so"}  # the development name the toolkit also makes, for libcuda
PROGRAMS = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
            "nvidia-cuda-mps-server")
PROGRAM_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin")
LIBDIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64")
DEVICE_NAMES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
CACHE_MAX = 1 << 20  # bytes of `ldconfig -p` read


class GpuView:
    """What a command's root gets: files to bind (the path in the root's library or program
    directory as parts, the guest's file), links to make (parts, target) and device nodes (name,
    major, minor)."""

    def __init__(self, libraries, programs, devices):
        self.libraries = libraries  # [(real name, guest path, soname)]
        self.programs = programs  # [(name, guest path)]
        self.devices = devices  # [(name, major, minor)]

    def __bool__(self):
        return bool(self.libraries or self.programs or self.devices)

    def libdir(self, image_fd):
        """The image's library directory, as parts: the first of LIBDIRS that is a directory in the
        image (read without following a link), else the first."""
        for candidate in LIBDIRS:
            try:
                if stat.S_ISDIR(_lstat_at(image_fd, candidate.split("/")).st_mode):
                    return candidate.split("/")
            except OSError:
                continue
        return LIBDIRS[0].split("/")

    def binds(self, libdir):
        """[(parts in the root, guest file)] to bind, read-only."""
        out = [([*libdir, real], path) for real, path, _ in self.libraries]
        out += [(["usr", "bin", name], path) for name, path in self.programs]
        return out

    def links(self, libdir):
        """[(parts in the root, target)]: each soname, and libcuda.so, linked to its real file."""
        out = []
        for real, _, soname in self.libraries:
            if soname != real:
                out.append(([*libdir, soname], real))
            if soname in DEV_LINKS:
                out.append(([*libdir, DEV_LINKS[soname]], soname))
        return out


def _lstat_at(fd, parts):
    """lstat of `parts` under the directory `fd`, every part opened without following a link."""
    here = os.dup(fd)
    try:
        for part in parts[:-1]:
            step = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=here)
            os.close(here)
            here = step
        return os.stat(parts[-1], dir_fd=here, follow_symlinks=False)
    finally:
        os.close(here)


def ld_cache(root="/"):
    """`ldconfig -p` of the guest: its cache of libraries by soname."""
    proc = subprocess.run(["ldconfig", "-p", "-r", root] if root != "/" else ["ldconfig", "-p"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30)
    return proc.stdout[:CACHE_MAX].decode("utf-8", "replace")


def _cached(cache, root):
    """soname -> the guest's real file (x86-64 libraries of the cache, the first listed)."""
    found = {}
    for line in cache.splitlines():
        name, arrow, path = line.strip().partition(" => ")
        soname = name.split(" (", 1)[0]
        if arrow and soname in LIBRARIES and soname not in found and "x86-64" in name:
            real = os.path.realpath(root.rstrip("/") + path.strip())
            if os.path.isfile(real):
                found[soname] = real
    return found


def _program(name, root):
    for directory in PROGRAM_DIRS:
        path = os.path.realpath(root.rstrip("/") + directory + "/" + name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _devices(dev):
    found = []
    names = sorted(n for n in os.listdir(dev) if n.startswith("nvidia") and (n in DEVICE_NAMES or n[6:].isdigit()))
    for name in names:
        st = os.stat(os.path.join(dev, name), follow_symlinks=False)
        if stat.S_ISCHR(st.st_mode):
            found.append((name, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return found


def find_view(root="/", dev="/dev", cache=None):
    """The GPU view of the guest whose root is `root` (the guest's own: "/")."""
    libraries = [(os.path.basename(path), path, soname)
                 for soname, path in sorted(_cached(ld_cache(root) if cache is None else cache, root).items())]
    programs = [(name, path) for name in PROGRAMS if (path := _program(name, root)) is not None]
    return GpuView(libraries, programs, _devices(dev))
