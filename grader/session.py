"""The judge's handle on one worker process: start it in its box, exchange frames, and end it for good."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from .sandbox import Box
from .worker.framing import HEADER, ProtocolError


class WorkerTimeout(Exception):
    """The worker did not answer within its time limit."""


class WorkerCrashed(Exception):
    """The worker died, closed its channel or sent something unreadable; the message says which."""


class CappedStream:
    """Drain a pipe to its end, keeping the first `limit` bytes, so a flood never blocks the worker."""

    def __init__(self, pipe: IO[bytes], limit: int) -> None:
        self.limit, self.kept, self.dropped = limit, bytearray(), 0
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe: IO[bytes]) -> None:
        fd = pipe.fileno()
        while chunk := os.read(fd, 1 << 16):
            room = self.limit - len(self.kept)
            self.kept += chunk[:max(room, 0)]
            self.dropped += max(len(chunk) - max(room, 0), 0)
        pipe.close()

    def text(self) -> str:
        self._thread.join(timeout=2)
        tail = f"\n[... {self.dropped} more bytes dropped]" if self.dropped else ""
        return self.kept.decode("utf-8", "replace") + tail


class Worker:
    """One sandboxed worker that has imported one submission."""

    def __init__(self, box: Box, functions: list[str]) -> None:
        self.box = box
        self.max_frame = box.limits.result_mb << 20
        request_read, self._request_write = os.pipe()
        self._response_read, response_write = os.pipe()
        config = {
            "submission": f"{box.runtime}/submission.py",
            "experiment": f"{box.runtime}/experiment.py" if box.experiment else None,
            "functions": functions,
            "request_fd": request_read,
            "response_fd": response_write,
            "max_frame_bytes": 1 << 30,
        }
        self.process = subprocess.Popen(
            box.command(config), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(request_read, response_write), start_new_session=True,
        )
        os.close(request_read)
        os.close(response_write)
        limit = box.limits.output_kb << 10
        assert self.process.stdout is not None and self.process.stderr is not None
        self.stdout = CappedStream(self.process.stdout, limit)
        self.stderr = CappedStream(self.process.stderr, limit)
        os.set_blocking(self._request_write, False)

    def _read(self, size: int, deadline: float) -> bytes:
        chunks, remaining = [], size
        while remaining:
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise WorkerTimeout()
            ready, _, _ = select.select([self._response_read], [], [], wait)
            if not ready:
                raise WorkerTimeout()
            chunk = os.read(self._response_read, min(remaining, 1 << 20))
            if not chunk:
                raise WorkerCrashed(self._death_note())
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def receive(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        (size,) = HEADER.unpack(self._read(HEADER.size, deadline))
        if size > self.max_frame:
            raise WorkerCrashed(f"the worker sent {size} bytes, more than the {self.max_frame}-byte result limit")
        from .worker import protocol  # torch, imported only once there is something to decode

        try:
            return protocol.decode(self._read(size, deadline))
        except ProtocolError as exc:
            raise WorkerCrashed(f"the worker sent unreadable data ({exc})") from None

    def send(self, message: dict[str, Any], timeout: float) -> None:
        from .worker import protocol

        data = memoryview(protocol.encode(message))
        deadline = time.monotonic() + timeout
        while data:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([], [self._request_write], [], wait)[1]:
                raise WorkerTimeout()
            try:
                data = data[os.write(self._request_write, data):]
            except (BrokenPipeError, BlockingIOError) as exc:
                if isinstance(exc, BrokenPipeError):
                    raise WorkerCrashed(self._death_note()) from None

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.send(message, timeout)
        return self.receive(timeout)

    def _death_note(self) -> str:
        try:
            code = self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "the worker closed its channel"
        if code == 97:
            return "the sandbox could not be set up (see stderr)"
        if code < 0:
            return f"the worker was killed by signal {signal.Signals(-code).name}"
        if code >= 128:
            try:
                return f"the worker was killed by signal {signal.Signals(code - 128).name}"
            except ValueError:
                pass
        return f"the worker exited with status {code}"

    def close(self) -> None:
        """Kill the worker and everything it started, and wait until all of it is gone."""
        if self.process.poll() is None:
            for child in _children(self.process.pid):
                _kill(child)  # PID 1 of the namespace: its death takes every process inside with it
            _kill(-self.process.pid)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill(self.process.pid)
            self.process.wait()
        if not self.box.confined:
            _kill(-self.process.pid)  # the session's leftovers; setsid escapees are out of reach here
        for fd in (self._request_write, self._response_read):
            try:
                os.close(fd)
            except OSError:
                pass


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill(pid: int) -> None:
    try:
        if pid < 0:
            os.killpg(-pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
