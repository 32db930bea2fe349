"""The judge's handle on one worker process: start it in its box, exchange frames, and end it for good.

A frame's bytes are handed on unread: what they hold is accepted, or refused, by `grader.judge.accept`."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from grader.confine.sandbox import Box
from grader.confine.zygote import ForkedProcess, Zygote
from grader.worker.framing import HEADER
from grader.worker.messages import WorkerConfig


class WorkerTimeout(Exception):
    """The worker did not answer within its time limit."""


class WorkerCrashed(Exception):
    """The worker died, closed its channel or sent something unreadable; the message says which."""


class AnswerTooLarge(WorkerCrashed):
    """The worker announced an answer over the result limit. Its size is the sender's choice, made perhaps while
    holding a hidden case's inputs: the message names only the limit."""


class CappedStream:
    """Drain a pipe to its end, keeping the first `limit` bytes, so a flood never blocks the worker."""

    def __init__(self, pipe: IO[bytes], limit: int) -> None:
        self.limit, self.kept, self.dropped = limit, bytearray(), 0
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe: IO[bytes]) -> None:
        fd = pipe.fileno()
        try:
            while chunk := os.read(fd, 1 << 16):
                room = max(self.limit - len(self.kept), 0)
                self.kept += chunk[:room]
                self.dropped += len(chunk) - min(room, len(chunk))
        except OSError:
            pass
        finally:
            pipe.close()

    def text(self) -> str:
        self._thread.join(timeout=2)
        tail = f"\n[... {self.dropped} more bytes dropped]" if self.dropped else ""
        return self.kept.decode("utf-8", "replace") + tail


class WorkerProcess:
    """One sandboxed worker process that has imported one submission: the pipes to it, its output, its end."""

    def __init__(self, box: Box, functions: list[str], zygote: Zygote | None = None) -> None:
        self.box = box
        self.max_frame = box.limits.result_mb << 20
        request_read, self._request_write = os.pipe()
        self._response_read, response_write = os.pipe()
        config: WorkerConfig = {
            "submission": f"{box.runtime}/submission.py",
            "functions": functions,
            "request_fd": request_read,
            "response_fd": response_write,
            "max_frame_bytes": 1 << 30,
        }
        init = box.init_config(config)
        self.process: subprocess.Popen[bytes] | ForkedProcess
        if zygote is not None:  # forked from a process that has imported torch already
            self.process = zygote.spawn(init, box.level, request_read, response_write)
        else:
            self.process = subprocess.Popen(
                box.command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(request_read, response_write),
                start_new_session=True,
                env=box.environment(),
            )
        os.close(request_read)
        os.close(response_write)
        if self.process.stdin is not None:
            try:
                self.process.stdin.write(json.dumps(init).encode())  # the sandbox's config, off every command line
                self.process.stdin.close()
            except OSError:
                pass  # the sandbox died at once (a broken pipe); the first read says how
        limit = box.limits.output_kb << 10
        assert self.process.stdout is not None and self.process.stderr is not None
        self.stdout = CappedStream(self.process.stdout, limit)
        self.stderr = CappedStream(self.process.stderr, limit)
        os.set_blocking(self._request_write, False)

    def _read(self, size: int, deadline: float) -> bytes:
        chunks, remaining = [], size
        while remaining:
            if not _ready(self._response_read, select.POLLIN, deadline):
                raise WorkerTimeout()
            chunk = os.read(self._response_read, min(remaining, 1 << 20))
            if not chunk:
                raise WorkerCrashed(self._death_note())
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def receive(self, timeout: float) -> bytes:
        """The payload of the next frame, unread; AnswerTooLarge for a frame over the result limit."""
        deadline = time.monotonic() + timeout
        (size,) = HEADER.unpack(self._read(HEADER.size, deadline))
        if size > self.max_frame:
            raise AnswerTooLarge(f"its answer was larger than the {self.max_frame >> 20} MB result limit")
        return self._read(size, deadline)

    def send(self, message: Mapping[str, Any], timeout: float) -> None:
        """Write one request without ever blocking: a worker that stops reading times out like a hang."""
        from grader.worker import protocol

        data = memoryview(protocol.encode(message))
        deadline = time.monotonic() + timeout
        while data:
            if not _ready(self._request_write, select.POLLOUT, deadline):
                raise WorkerTimeout()
            try:
                data = data[os.write(self._request_write, data) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise WorkerCrashed(self._death_note()) from None

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
        """Kill the worker and everything it started; return only once all of it is gone."""
        self._end()
        if self.box.cgroup is not None:
            self.box.cgroup.kill_all()  # a backstop: nothing started in this slot survives, whatever went wrong
        if self.box.drops_uid:
            _kill_uid(self.box.uid)  # the slot's uid is this worker's alone until the slot is released
        for fd in (self._request_write, self._response_read):
            try:
                os.close(fd)
            except OSError:
                pass

    def _end(self) -> None:
        """SIGTERM the box's init, which kills the worker and every descendant and then exits; `unshare` exits
        once it has reaped the init. After 5 s, SIGKILL the init: the kernel then kills and reaps the whole
        namespace before the init can be reaped, so `unshare` still exits last. Only an `unshare` that outlives
        that by 2 s more is killed itself."""
        started = time.monotonic()
        while self.process.poll() is None:
            waited = time.monotonic() - started
            if waited > 7:
                _signal(self.process.pid, signal.SIGKILL)  # --kill-child takes the init with it
                self.process.wait()
                break
            init = _children(self.process.pid) if self.box.confined else [self.process.pid]
            for pid in init:
                _signal(pid, signal.SIGKILL if waited > 5 else signal.SIGTERM)
            try:
                self.process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        if not self.box.confined:
            _signal(-self.process.pid, signal.SIGKILL)  # the session's leftovers, had the learner killed its init


def _ready(fd: int, event: int, deadline: float) -> bool:
    """Wait until `fd` can be read or written (poll has no limit on fd numbers, unlike select)."""
    wait = deadline - time.monotonic()
    if wait <= 0:
        return False
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(wait * 1000))


def _kill_uid(uid: int, timeout: float = 5.0) -> None:
    """SIGKILL every live process of `uid` until none is left."""
    deadline = time.monotonic() + timeout
    while (pids := _processes_of(uid)) and time.monotonic() < deadline:
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.01)


def _processes_of(uid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid and not fields.get("State", "").strip().startswith("Z"):
            found.append(int(entry.name))
    return found


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _signal(pid: int, signum: int) -> None:
    """Signal a process (or, for a negative pid, a process group) that may already be gone."""
    try:
        if pid < 0:
            os.killpg(-pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
