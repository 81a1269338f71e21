"""What job.json says of a command that runs in the entry's own root (a container entry's image,
vm/job.py InRoot), checked again here: the host builds it, but a damaged CD must be refused, and
every path in it is about to be a mount point the agent makes as root."""

from system import JobError


class RootError(Exception):
    """A command cannot start in the entry's root because of what the image is or holds (a user
    it does not name, a working directory it lacks): that command fails, as the entry's fault."""

# The agent mounts its own file systems at these in the entry's root.
RESERVED = ("/proc", "/sys", "/dev")
ENV_MAX = 1000
MAX_BINDS = 4  # CD directories bound read-only at paths of their own (an evaluation's ground truth)


def _list(value, what, most):
    if not isinstance(value, list) or len(value) > most:
        raise JobError(f"{what} are not a list of at most {most}")
    return value


def root_path(value, what):
    """The parts of an absolute, normal path in the entry's root, outside RESERVED."""
    if not isinstance(value, str) or not value.startswith("/") or value == "/" or "\0" in value or len(value) > 1024:
        raise JobError(f"{what} is not an absolute path: {value!r}")
    parts = value.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        raise JobError(f"{what} has an empty, . or .. part: {value!r}")
    if any(value == r or value.startswith(r + "/") for r in RESERVED):
        raise JobError(f"{what} is under {', '.join(RESERVED)}: {value!r}")
    return parts


def cd_path(value, what):
    if not isinstance(value, str) or not value or value.startswith("/") or "\0" in value or \
            any(p in ("", ".", "..") for p in value.rstrip("/").split("/")):
        raise JobError(f"{what} is not a relative path on the CD: {value!r}")
    return value.rstrip("/")


class RootSpec:
    """One command's "root" object of job.json, checked."""

    def __init__(self, doc):
        if not isinstance(doc, dict):
            raise JobError("a command's root is not an object")
        self.user = doc.get("user", "")
        if not isinstance(self.user, str) or "\0" in self.user or "\n" in self.user or len(self.user) > 256:
            raise JobError(f"the image's user is not a string such as 1000:1000: {self.user!r}")
        self.env = doc.get("env", [])
        if not isinstance(self.env, list) or len(self.env) > ENV_MAX or not all(
                isinstance(v, str) and "=" in v[1:] and "\0" not in v for v in self.env):
            raise JobError("the image's environment is not a list of NAME=value strings")
        self.workdir = doc.get("workdir", "/")
        if not isinstance(self.workdir, str) or not self.workdir.startswith("/") or "\0" in self.workdir:
            raise JobError(f"the working directory is not an absolute path: {self.workdir!r}")
        self.input = root_path(doc.get("input", "/input"), "the input")
        self.output = root_path(doc.get("output", "/output"), "the output")
        shorter = min(len(self.input), len(self.output))
        if self.input[:shorter] == self.output[:shorter]:
            raise JobError("the input and the output overlap")
        files = doc.get("input_files", [])
        if not isinstance(files, list):
            raise JobError("the input files are not a list")
        self.input_files = [cd_path(f, "an input file") for f in files]
        names = [f.rsplit("/", 1)[-1] for f in self.input_files]
        if len(set(names)) != len(names):
            raise JobError("two input files share a name")
        self.binds = [self._bind(b) for b in _list(doc.get("binds", []), "the binds", MAX_BINDS)]
        for parts, _ in self.binds:
            for other in (self.input, self.output, *(p for p, _ in self.binds if p is not parts)):
                shorter = min(len(parts), len(other))
                if parts[:shorter] == other[:shorter]:
                    raise JobError(f"the bind at /{'/'.join(parts)} overlaps the input, the output or another bind")
        self.input_dir = doc.get("input_dir")
        if self.input_dir is not None:
            self.input_dir = cd_path(self.input_dir, "the input directory")
            if self.input_files:
                raise JobError("the input is either files or a directory, not both")

    @staticmethod
    def _bind(doc):
        """(the path's parts in the root, the CD directory bound read-only on it)."""
        if not isinstance(doc, dict):
            raise JobError("a bind is not an object")
        return root_path(doc.get("path"), "a bind's path"), cd_path(doc.get("cd_dir"), "a bind's CD directory")

    def environment(self, home="/"):
        """The image's environment, with what Docker adds if the image does not say: a PATH, and
        HOME, the user's home from the image's /etc/passwd (root_disk.image_account), else "/"
        (images built with `pip install --user` find their packages under it)."""
        env = dict(v.split("=", 1) for v in self.env)
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        env.setdefault("HOME", home)
        return env
