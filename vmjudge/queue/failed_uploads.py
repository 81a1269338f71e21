"""Each owner's failed uploads to the portal in the last hour, counted in the queue's database.

A refused or failed upload costs the judge what an accepted one does (the body streamed to
disk, the archive copied and listed, a tar.gz decompressed whole) and gives nothing back, so
the portal lets an owner have only so many in an hour ([web] failed_uploads_per_hour). Kept
in the database rather than in the portal's memory, the count holds across restarts and
across several portal processes on one queue. Rows older than an hour are of no more use: an
owner's are removed as the owner's next one is added.
"""

from __future__ import annotations

import time

from .connection import Database

WINDOW = 3600.0


class FailedUploads:
    def __init__(self, database: Database):
        self.database = database

    def add(self, owner: str, status: int) -> None:
        """One more failed upload of `owner`, answered with `status`."""
        at = time.time()
        with self.database.transaction() as db:
            db.execute("DELETE FROM failed_uploads WHERE owner = ? AND at < ?", (owner, at - WINDOW))
            db.execute("INSERT INTO failed_uploads (owner, at, status) VALUES (?, ?, ?)", (owner, at, status))

    def last_hour(self, owner: str) -> int:
        with self.database.connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM failed_uploads WHERE owner = ? AND at >= ?",
                                  (owner, time.time() - WINDOW)).fetchone()[0])
