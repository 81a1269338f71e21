"""The four evaluation stages: prep, quiz, exam (in VMs) and score (on the host)."""
