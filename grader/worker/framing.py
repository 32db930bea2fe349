"""Frame header and protocol errors, free of torch so the judge can start a worker before importing it."""

from __future__ import annotations

import struct

HEADER = struct.Struct(">Q")  # 8-byte big-endian payload length


class ProtocolError(Exception):
    """A frame could not be read: truncated, oversized or not plain data."""


class FrameOverdue(ProtocolError):
    """Reading a frame outlasted the time its call had: the sender's lateness, not an unreadable frame."""
