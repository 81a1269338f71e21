"""The scorer's side of stage 4 with [score] isolate = true (isolated.py), run as a script by the guest's
python3 in a VM of the challenge's image, with no network and as the guest's unprivileged user. It loads
the challenge's scorer file from the CD, calls its function on the entry's archived stage-3 results and
the reference directory (both on the CD), and writes what it returned to scores.json in the home. The
host collects that file, bounded, and checks it as it checks a host scorer's dict: nothing here trusts
the scorer, and a raise ends the script with its traceback and a non-zero status.

The CD's score/ directory holds this file within a copy of vmjudge's sources (lib/), so that a scorer
may use vmjudge's own helpers as a host scorer does.

Usage: python3 score/lib/vmjudge/stages/score/in_vm.py FILE FUNCTION   (in the home, score/ linked there)
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCORES = "scores.json"
# What scores.json holds, alone, when the scorer refused the entry's answers (vmjudge.errors.AnswerError,
# as the built-ins' answer rules raise it): the entry's fault, failed as on the host, not the scorer's.
ANSWER_ERROR = "vmjudge_answer_error"


def main(argv: list[str]) -> int:
    lib = Path(__file__).resolve().parents[3]  # score/lib: vmjudge/stages/score/in_vm.py within it
    score_dir = lib.parent
    sys.path[0] = str(lib)  # not this file's directory: vmjudge's copy on the CD, whole
    from vmjudge.errors import AnswerError  # noqa: PLC0415 (importable only once lib is on the path)
    from vmjudge.queue.results import decode  # noqa: PLC0415

    name, function = argv[1], argv[2]
    spec = importlib.util.spec_from_file_location("challenge_scorer", score_dir / name)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{name} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = decode((score_dir / "results.json").read_bytes())
    try:
        returned = getattr(module, function)(results, score_dir / "reference")
    except AnswerError as exc:
        returned = {ANSWER_ERROR: {"message": str(exc), "detail": exc.detail}}
    Path(SCORES).write_text(json.dumps(returned, default=repr))  # the host judges what it holds
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
