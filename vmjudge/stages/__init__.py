"""The four evaluation stages, in the order vmjudge.pipeline gives: prep, quiz, exam (each one
VM run) and score (on the host). What every stage gets and gives is context.py; what stages
share lives here rather than in one of them: the record job of the quiz and the exam
(records.py), the answer-line rules (answers.py), a stage's capped log (stage_log.py)."""
