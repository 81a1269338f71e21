"""What the judge keeps of every entry: the queue (db.py and history.py, on SQLite or PostgreSQL as
connection.py opens it, the SQL that differs in dialect.py, its tables in schema.py, its records in
rows.py, its retry policy in retry.py and requeue.py), the spool of submitted archives (spool.py) and
their admission (admit.py), stage 3's results for scoring (results.py), the organiser's list of
entries (listing.py), which GPUs are in service (gpu_slots.py), what `vmjudge gc` may remove of
finished entries (retention.py), and for several hosts sharing one queue: the hosts (hosts.py), the
claims' leases (leases.py) and archives and results kept in the database (blobs.py); the outbox of
notifications, written with the events that cause them (outbox.py)."""
