"""Stage 3, exam (stage.py): next.sh on every test record in a VM, silently, under the stage's
cap; its results go to the results store (vmjudge.queue.results)."""
