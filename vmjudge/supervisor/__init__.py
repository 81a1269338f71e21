"""The supervisor: the daemon that fills VM slots from the queue (daemon.py; its CPU and GPU
slots in slots.py, its lines to the organiser in progress.py, its heartbeat in heartbeat.py, the
challenges it may judge when hosts share the queue in environment.py), the evaluation of one stage
(evaluate.py) and its bookkeeping (attempts.py), and the organiser's batch work
on the same machinery: re-scoring (rescore.py) and the host check (doctor.py)."""
