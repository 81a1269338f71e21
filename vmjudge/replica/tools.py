"""The tools a container entry's stage 1 runs (skopeo, umoci, mksquashfs, unsquashfs), for a
replica of a container challenge: the judge's own binaries, copied from this host with every
shared library they load (and the dynamic loader), so that the participant's replica makes the
image's root with exactly the programs the judge makes it with. The judge's guest root has none of
them, and is left as it is (its bytes are the judge's): the replica's init puts a small wrapper for
each at /usr/bin/TOOL in its own writable layer, which runs the tool with the bundled loader and
libraries from the replica CD (boot/init).

The libraries are found by ldd(1) on the host's own binaries, which are the judge's, never an
entry's: ldd runs nothing but them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ..errors import MediaError
from ..images.root_tools import PACKAGES

TOOLS = ("skopeo", "umoci", "mksquashfs", "unsquashfs")
LOADER = "ld-linux-x86-64.so.2"
ON_ISO = "vmjudge/tools"  # bin/TOOL and lib/LIBRARY on the replica
_LIBRARY = re.compile(r"^\s*(?:(\S+) => )?(/\S+) \(0x[0-9a-f]+\)$")


def _libraries(binary: Path) -> dict[str, Path]:
    """soname -> the file it resolves to on this host, for every library `binary` loads."""
    proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    if proc.returncode != 0:
        if "not a dynamic executable" in proc.stdout + proc.stderr:
            return {}
        raise MediaError(f"ldd {binary} failed: {proc.stderr.strip()}")
    found = {}
    for line in proc.stdout.splitlines():
        if "not found" in line:
            raise MediaError(f"{binary} needs a library this host lacks ({line.strip()}): reinstall it.")
        match = _LIBRARY.match(line)
        if match:
            path = Path(match.group(2))
            found[match.group(1) or path.name] = path.resolve()
    return found


def tool_files() -> dict[str, Path]:
    """Path on the replica ISO -> the host's file: each tool and every library any of them loads."""
    files: dict[str, Path] = {}
    for tool in TOOLS:
        where = shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")
        if where is None:
            raise MediaError(f"{tool} is not installed, and the replica of a container challenge carries the "
                             f"judge's own copy: install Debian's {PACKAGES.get(tool, tool)} (make setup does).")
        binary = Path(where).resolve()
        files[f"{ON_ISO}/bin/{tool}"] = binary
        for name, library in _libraries(binary).items():
            files[f"{ON_ISO}/lib/{Path(name).name}"] = library
    if f"{ON_ISO}/lib/{LOADER}" not in files:
        raise MediaError(f"the tools' dynamic loader {LOADER} was not found by ldd: this host is not amd64 Linux.")
    return files
