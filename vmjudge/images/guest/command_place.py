"""Where one command runs: in the guest's own root, in the entry's home (an archive entry's, and
the judge's own checks), or in the entry's own root (a container entry's, root_*.py). Each
place readies itself, starts the command, says whom the kill sweep ends and where the files to
send back are, and is undone after. command.py runs either the same way: the same cgroup,
limits, watch, output, figures and frames.

The entry's root is imported only by a job that has one: every import is paid at each boot."""

import pwd

from media import HOME, LinkError, make_links, remove_links
from run_guard import start_command


class PlaceError(Exception):
    """The command cannot run there because of what the entry left or is (a record file's name
    taken in its home, a user its image lacks): the command fails, as the entry's fault."""


class Home:
    def __init__(self, cmd, entry):
        self.user = entry
        self.files = HOME
        self.links: list[str] = []
        try:
            make_links(cmd.links, self.links)
        except LinkError as exc:
            remove_links(self.links)
            raise PlaceError(str(exc)) from None

    def start(self, cmd, write_fd, cgroup, err_fd=None):
        return start_command(cmd.argv, cmd.user, self.user, HOME, write_fd, cwd=cmd.cwd,
                             **({"cgroup": cgroup.path} if cgroup else {}))

    def ended(self, cgroup):
        """Whatever is left in the command's cgroup, killed at once (cgroup.kill): a chain of processes
        that fork and exit as fast as they can is never all seen by a sweep of /proc, the kernel's kill
        takes them all, forks under way included."""
        cgroup.kill()

    def undo(self):
        remove_links(self.links)


class Root:
    def __init__(self, index, cmd, entry, gpu=None):
        from root_disk import image_account
        from root_layers import Layers
        from root_spec import RootError, RootSpec
        self.spec = RootSpec(cmd.root)
        try:
            self.account = image_account(self.spec.user, entry)
            uid, gid = self.account.uid, self.account.gid
            self.layers = Layers(index, self.spec, uid, gid, gpu)
        except RootError as exc:
            raise PlaceError(str(exc)) from None
        except OSError as exc:  # Layers: a home disk full of the entry's own writing
            raise PlaceError(f"could not make the command's layers on the home disk: {exc.strerror}") from None
        self.user = pwd.struct_passwd(("image", "x", uid, gid, "", "/", "/bin/sh"))
        self.files = self.layers.path("output")
        self.gpu_devices = gpu.devices if gpu else ()

    def start(self, cmd, write_fd, cgroup, err_fd=None):
        from root_start import start_in_root
        return start_in_root(cmd.argv, self.spec, self.layers, self.account, write_fd, cgroup.path, self.gpu_devices,
                             err_fd)

    def ended(self, cgroup):
        """The backstop to the sweep by user: whatever is left in the command's cgroup."""
        cgroup.kill()

    def undo(self):
        self.layers.remove()
