"""The verdict each of the example challenges' sample entries must get, by its directory's name
(examples/*/entries/CASE): test_pipeline checks it in VMs, bench/demo_under_load.py under load."""

# case: (outcome, failed_stage, reason)
CASES = {
    "good": ("scored", None, None),
    "setup-error": ("failed", "prep", "setup-error"),
    "quiz-mismatch": ("failed", "quiz", "quiz-mismatch"),
    "quiz-timeout": ("failed", "quiz", "quiz-timeout"),
    "dryrun": ("dry-run", None, None),
    "exam-errors": ("scored", None, None),
    "exam-over-cap": ("failed", "exam", "exam-timeout"),
}

# case: what `submit` says refusing it (the checks stage 1 makes on the host run at upload: #58)
REFUSED_AT_UPLOAD = {
    "missing-file": "Missing component(s): next.sh: put it at the top of the archive and submit again.",
}
