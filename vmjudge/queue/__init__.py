"""What the judge keeps of every entry: the queue (db.py, opened in connection.py, with its tables in
schema.py, its records in rows.py and its retry policy in retry.py), the spool of submitted archives
(spool.py) and their admission (admit.py), stage 3's results for scoring (results.py), the
organiser's list of entries (listing.py), which GPUs are in service (gpu_slots.py), and what
`vmjudge gc` may remove of finished entries (retention.py)."""
