"""Every command line of vmjudge: `vmjudge` (main.py, with rescore.py, replica.py, gpu.py,
entries.py (entries and logs), usage.py (VM time per owner), service.py and image_transfer.py
(image export and import) as its subcommands; home.py opens the site and its queue for each;
hosts.py registers a challenge's hashes and shows the hosts sharing the queue) and, inside the
booted replica, `vmjudge-replica` (replica_check.py, which imports neither click nor anything
else the replica's Python lacks)."""
