"""vmjudge: evaluates code-execution challenge entries in network-less qemu VMs."""

__version__ = "0.2.0"
