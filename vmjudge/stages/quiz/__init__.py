"""Stage: quiz (built with the evaluation pipeline)."""
