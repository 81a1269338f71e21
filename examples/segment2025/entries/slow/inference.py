"""segment2025 sample: an entry far slower than the challenge allows (per_record seconds a case):
the first training record times out (quiz-timeout)."""

import time

time.sleep(3600)
