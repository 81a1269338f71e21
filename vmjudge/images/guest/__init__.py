"""Code that runs inside the judge's VM: the agent (agent.py, the job loop) and the modules it
imports, the run guard among them. They are copied into the image side by side as plain
files, so they use only the standard library and import each other by plain name; the host
imports frames.py from here to share the format, and the replica's check run_guard.py."""
