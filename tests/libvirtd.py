"""The host's libvirtd as the tests stop, start and watch it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from .waiting import wait_until

# As `make setup` starts it where no systemd does: under a subreaper that reaps its qemus at once.
START = Path(__file__).resolve().parent.parent / "vmjudge" / "host" / "start-libvirtd"


def libvirt_answers(uri: str) -> bool:
    return subprocess.run(["virsh", "-c", uri, "uri"], capture_output=True, timeout=300).returncode == 0


class Libvirtd:
    """Stops and starts the host's libvirtd the way it was started (systemd, or by hand as `make setup` does)."""

    def __init__(self, uri: str):
        self.uri = uri
        self.systemd = subprocess.run(["systemctl", "is-active", "--quiet", "libvirtd"],
                                      capture_output=True, timeout=300).returncode == 0 \
            if shutil.which("systemctl") else False

    def stop(self) -> None:
        if self.systemd:
            subprocess.run(["systemctl", "stop", "libvirtd", "libvirtd.socket", "libvirtd-ro.socket",
                            "libvirtd-admin.socket"], check=True, timeout=300)
        else:
            pids = [int(p) for p in subprocess.run(["pgrep", "-x", "libvirtd"], capture_output=True,
                                                   text=True, timeout=300).stdout.split()]
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), 60, "libvirtd to exit")
        assert not libvirt_answers(self.uri)

    def start(self) -> None:
        if self.systemd:
            subprocess.run(["systemctl", "start", "libvirtd"], check=True, timeout=300)
        else:
            subprocess.run([str(START)], check=True, timeout=300)
        wait_until(lambda: libvirt_answers(self.uri), 60, "libvirtd to answer")
