"""The guest system as the agent meets it: devices that appear late, tools that must succeed,
and the errors that end a job (their message is what the host is told)."""

import os
import subprocess
import time


class JobError(Exception):
    """The job cannot be carried out; the message is sent to the host."""


class EntryFault(JobError):
    """The job cannot be carried out because of what the entry is or did (it does not fit
    the home disk, say): the host charges it to the entry, never to the infrastructure."""

    def __init__(self, reason, message):
        JobError.__init__(self, message)
        self.reason = reason


def wait_for(path_or_fn, seconds):
    deadline = time.monotonic() + seconds
    while True:
        found = path_or_fn() if callable(path_or_fn) else (path_or_fn if os.path.exists(path_or_fn) else None)
        if found:
            return found
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def run_quiet(argv, cwd=None):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd)
    if proc.returncode != 0:
        raise JobError(f"{' '.join(argv)} failed: {proc.stdout.decode('utf-8', 'replace').strip()}")
