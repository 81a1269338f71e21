"""segment2025 sample: an image whose layers try what a hostile one would (see README.md): a
setuid copy of a program, a symbolic link out of the image to the host's /etc/shadow, a disk's
device node, /output made a link to /etc. The judge takes the setuid bit and the device node out
when it makes the root, keeps the link (it leads only within the image, which has no
/etc/shadow) and mounts a fresh /output over the link. This checks each from inside, then
segments as the good entry does; labelled org.vmjudge.dryrun, it ends after the quiz."""

import os
import runpy
import stat
import sys

found = []
mode = os.stat("/app/hostile/suid").st_mode
found.append(f"/app/hostile/suid setuid: {bool(mode & stat.S_ISUID)}")
try:
    with open("/app/hostile/escape") as f:
        found.append(f"/app/hostile/escape read: {len(f.read())} bytes")
except OSError as exc:
    found.append(f"/app/hostile/escape: {exc.strerror}")
found.append(f"/dev/sda exists: {os.path.exists('/dev/sda')}")
found.append(f"/output is a link: {os.path.islink('/output')}")
print("; ".join(found), file=sys.stderr)
if mode & stat.S_ISUID or os.path.exists("/dev/sda") or os.path.islink("/output") or \
        not found[1].endswith("No such file or directory"):
    sys.exit(9)
runpy.run_path("/app/good/inference.py", run_name="__main__")
