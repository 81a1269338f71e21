"""Stage: exam (built with the evaluation pipeline)."""
