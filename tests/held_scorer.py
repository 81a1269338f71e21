"""A challenge scorer for one test: af2017's, held while a file exists, so the test can kill
the daemon in the middle of stage 4 (which otherwise takes a few milliseconds)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from vmjudge.stages.score import af2017


def score(results, reference):
    hold = Path(os.environ["VMJUDGE_TEST_HOLD"])
    hold.with_suffix(".scoring").touch()  # tells the test that stage 4 has begun
    while hold.exists():
        time.sleep(0.05)
    return af2017.score(results, reference)
