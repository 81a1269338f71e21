"""Stage: prep (built with the evaluation pipeline)."""
