"""Who may upload now, decided before a byte of the upload's body is read or stored.

The judge pays for an upload before it can refuse it: the body streamed to disk, the archive
copied and listed (a tar.gz decompressed whole), so the owner who asks pays first:

- one upload in flight per owner in this portal process: a second one while the first is
  streaming or being checked gets 429 at once, so one owner cannot take every archive check,
  nor fill the upload directory, by sending many at once;
- refused and failed uploads count ([web] failed_uploads_per_hour, in the queue's database:
  queue/failed_uploads.py): past the limit an owner's uploads get 429 before their body is
  read, until the hour has passed;
- the challenge's limits on the owner (queue/admit.py owner_limits: entries in the last hour,
  entries waiting or running, bytes kept in the spool) are checked by upload.py as soon as the
  form has named its challenge, before the archive's first byte is written.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.exceptions import HTTPException

from ..queue.failed_uploads import FailedUploads


@dataclass
class Gate:
    failed: FailedUploads
    failed_per_hour: int
    in_flight: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def turn(self, owner: str) -> Iterator[None]:
        """The owner's one upload in flight, or 429 if another is."""
        with self.lock:
            if owner in self.in_flight:
                raise HTTPException(429, f"{owner} already has an upload in progress: wait until it has been "
                                         "answered, then send the next.")
            self.in_flight.add(owner)
        try:
            yield
        finally:
            with self.lock:
                self.in_flight.discard(owner)

    def check_failures(self, owner: str) -> None:
        """429 for an owner whose uploads failed too often in the last hour (reads the queue)."""
        failed = self.failed.last_hour(owner)
        if failed >= self.failed_per_hour:
            raise HTTPException(429, f"{failed} of {owner}'s uploads in the last hour were refused or failed, the "
                                     "most the portal takes: check your entries with the replica and upload again "
                                     "in an hour.")
