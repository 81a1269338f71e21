"""The channels notifications go out by (issue 35): email over SMTP (smtp.py) and signed webhooks
(webhook.py, signature.py), each given a finished Message (message.py) and a deadline. They know
nothing of the queue: what is said, to whom and when is decided above (queue/outbox.py,
reports/notice.py, supervisor/notifier.py)."""
