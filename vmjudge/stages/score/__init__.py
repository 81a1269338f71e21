"""Stage: score (built with the evaluation pipeline)."""
