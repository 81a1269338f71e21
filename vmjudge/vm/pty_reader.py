"""The bytes of the data channel, read with pyserial from the pty libvirt gives the domain.

Apart from channel.py because the replica ISO reads the same frames from a pipe and its
Python has no pyserial.
"""

from __future__ import annotations

import select

import serial

from ..errors import InfrastructureError
from .channel import ChannelClosed

READ_SIZE = 1 << 20


class ChannelReader:
    """Reads what arrives on the pty, in raw mode, without blocking past a deadline."""

    def __init__(self, pty_path: str):
        try:
            self._port = serial.Serial(pty_path, timeout=0, exclusive=True)
        except (serial.SerialException, OSError) as exc:
            raise InfrastructureError("channel-broken", f"cannot open the data channel {pty_path}: {exc}") from None

    def read(self, timeout: float) -> bytes:
        """Bytes available within `timeout` seconds (b"" if none); ChannelClosed at the end."""
        try:
            ready, _, _ = select.select([self._port.fileno()], [], [], max(timeout, 0))
            if not ready:
                return b""
            waiting = self._port.in_waiting
            data = self._port.read(min(max(waiting, 1), READ_SIZE))
        except OSError as exc:  # serial.SerialException is an OSError
            raise ChannelClosed(str(exc)) from None
        if not data:
            raise ChannelClosed("end of stream")
        return data

    def write(self, data: bytes) -> None:
        """The host's one line to the guest: a warm-started agent's wake (vm/warm.py)."""
        try:
            self._port.write(data)
            self._port.flush()
        except OSError as exc:
            raise InfrastructureError("channel-broken", f"cannot write to the data channel: {exc}") from None

    def close(self) -> None:
        self._port.close()
