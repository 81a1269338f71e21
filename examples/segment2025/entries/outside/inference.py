"""segment2025 sample: an entry that writes its mask where another challenge wanted it
(HECKTOR 2025's /tmp/output) and tries to change what it must not: its input, its image, the
submitted results. It exits 0; the quiz finds no mask in /output (quiz-error), and nothing it
wrote elsewhere outlives its command."""

import os

record = os.environ["VMJUDGE_RECORD"]
os.makedirs("/tmp/output", exist_ok=True)
with open(f"/input/{record}.pt.mha", "rb") as f:
    data = f.read()
with open(f"/tmp/output/{record}.mha", "wb") as f:
    f.write(data)
for path in (f"/input/{record}.pt.mha", "/app/good/inference.py", f"/submitted/{record}.mha", "/etc/passwd"):
    try:
        with open(path, "ab") as f:
            f.write(b"changed\n")
        print(f"wrote {path}")
    except OSError as exc:
        print(f"could not write {path}: {exc.strerror}")
