"""Stage 2, quiz (stage.py): next.sh on every training record in a VM, each result compared
with what the entry submitted as it arrives; at a mismatch, both sides shown (mismatch.py)."""
