"""Tries to write where it may not (the data, the system, the root), then writes its submission."""
from pathlib import Path

import pandas as pd

for target in ("data/submission_format.csv", "data/planted.txt", "/etc/planted", "/planted", "/usr/lib/planted"):
    try:
        with open(target, "w") as f:
            f.write("planted")
        print(f"WROTE {target}")
    except OSError as exc:
        print(f"refused {target}: {exc.strerror}")
fmt = pd.read_csv("data/submission_format.csv", index_col=0)
(fmt + 1).to_csv(Path("submission.csv"))
