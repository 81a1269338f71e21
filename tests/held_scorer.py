"""A challenge scorer for one test: accuracy's, held on a FIFO while it exists, so the test can kill
the daemon in the middle of stage 4 (which otherwise takes a few milliseconds)."""

from __future__ import annotations

import os
from pathlib import Path

from vmjudge.scorers.builtin import accuracy


def score(results, reference):
    hold = Path(os.environ.get("VMJUDGE_TEST_HOLD") or "/nonexistent")  # unset at `challenge add`'s own try
    if hold.exists():  # a FIFO: opening it blocks until a writer comes, i.e. for as long as the test likes
        hold.with_suffix(".scoring").touch()  # tells the test that stage 4 has begun
        with hold.open("rb") as fifo:
            fifo.read()
    return accuracy.score(results, reference)
