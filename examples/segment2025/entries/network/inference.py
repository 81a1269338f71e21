"""segment2025 sample: an entry that downloads its weights when it starts, as a notebook would.
The judge's VM has no network interface: the connection fails at once (Network is unreachable),
the entry exits 2, and its quiz fails at the first training record (quiz-error), saying so."""

import socket
import sys

try:
    socket.create_connection(("93.184.215.14", 443), timeout=10).close()  # a public address
except OSError as exc:
    print(f"could not download the model weights: {exc}", file=sys.stderr)
    sys.exit(2)
print("downloaded the model weights")
