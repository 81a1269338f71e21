"""segment2025 sample: an entry that crashes, as one whose model file was left out of its image
does. Its quiz fails at the first training record (quiz-error), the traceback in its report."""

import os

record = os.environ["VMJUDGE_RECORD"]
with open("/app/model/weights.pt", "rb") as f:  # not in the image
    weights = f.read()
