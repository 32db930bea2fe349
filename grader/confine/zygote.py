"""Fork sandboxed workers from one process that has already imported torch, so a class pays for it once.

The zygote is trusted and holds nothing secret: it imports torch, the worker package and the sandbox's own
setup code, never the judge, a problem or the reference, and starts from the workers' fixed environment, not
the judge's. What it receives is the layout of each box (the paths /proc/self/mountinfo shows a worker anyway)
and the worker's own config. For each submission the judge sends it the box's
config and four pipe ends over a Unix socket; the zygote forks a child that enters fresh namespaces (as
`unshare --fork` would), forks the box's init below it, and the init forks the worker, which serves the
judge without an exec. Every confinement step is the one `sandbox_init` takes for an exec'd worker.
"""

from __future__ import annotations

import array
import ctypes
import io
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, TypedDict

from grader.confine.sandbox_init import InitConfig, check_config

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
PR_SET_PDEATHSIG = 1
STATUS = struct.Struct(">i")
MAX_JOB_BYTES = 1 << 20
LEVELS = ("namespaces+uid", "user-namespace", "limits-only")


class Job(TypedDict):
    """What the judge sends the zygote for one worker (as JSON, with the worker's pipe ends beside it)."""

    init: InitConfig  # the box's config, as `sandbox_init` would read it on stdin
    level: str  # one of LEVELS: which namespaces the child enters before it becomes the box's init


def read_job(data: bytes) -> Job:
    """A job, its config checked as `sandbox_init` checks its own; ValueError otherwise."""
    raw = json.loads(data)
    if type(raw) is not dict or set(raw) != {"init", "level"} or raw["level"] not in LEVELS:
        raise ValueError("a zygote job holds an init config and an isolation level")
    return {"init": check_config(raw["init"]), "level": raw["level"]}


# ----------------------------------------------------------------------------- the zygote process


def _enter_namespaces(level: str) -> None:
    from grader.confine import sandbox_init

    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    uid, gid = os.getuid(), os.getgid()
    if level == "user-namespace":
        flags |= CLONE_NEWUSER
    if sandbox_init._libc.unshare(flags) != 0:
        sandbox_init.fail(f"unshare: {os.strerror(ctypes.get_errno())}")
    if level == "user-namespace":  # map the caller to root inside, as `unshare --map-root-user` does
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)


def _child(job: Job, fds: list[int]) -> None:
    """In the forked child: become what `unshare --fork` would be, then the box's init below it."""
    from grader.confine import sandbox_init
    from grader.worker import __main__ as worker_main
    from grader.worker.messages import read_worker_config

    stdout, stderr, request, response, status = fds
    sandbox_init._libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the zygote gone, so are we
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (stdout, 1), (stderr, 2)):
        os.dup2(source, target)
    keep = {0, 1, 2, request, response, status}
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    config = job["init"]
    worker_config = read_worker_config({**config["worker"], "request_fd": request, "response_fd": response})
    sys.argv = ["-c", json.dumps(worker_config)]  # what an exec'd worker sees: the same process, forked or not
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)  # as `python -u` would
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)

    def serve() -> None:
        worker_main.serve(worker_config)
        sys.stdout.flush()

    if job["level"] != "limits-only":
        _enter_namespaces(job["level"])
    init = os.fork()
    if init == 0:
        os.close(status)
        sandbox_init.start(config, serve)
    # the judge ends a box by SIGTERM to its init: ours when there is no namespace to find it in
    signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(init, signal.SIGTERM))
    os.close(request)
    os.close(response)
    _, code = os.waitpid(init, 0)  # the init exits only once everything below it is gone
    os.write(status, STATUS.pack(os.waitstatus_to_exitcode(code)))
    os._exit(0)


def _receive(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    fds = array.array("i")
    data, ancdata, _, _ = sock.recvmsg(MAX_JOB_BYTES, socket.CMSG_LEN(8 * fds.itemsize))
    if not data:
        return None
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def serve_forever(sock: socket.socket) -> None:
    """Fork one child per job until the judge closes the socket; reap children as they end."""
    while True:
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not select.select([sock], [], [], 0.5)[0]:
            continue
        job = _receive(sock)
        if job is None:
            return
        data, fds = job
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                _child(read_job(data), fds)  # a job it cannot read ends this child, never the zygote
            except BaseException as exc:  # never return into the zygote's loop
                os.write(2, f"sandbox setup failed: {type(exc).__name__}: {exc}\n".encode())
            os._exit(97)
        for fd in fds:
            os.close(fd)
        sock.sendall(STATUS.pack(pid))


def main() -> None:
    from grader.confine import seccomp
    from grader.worker import __main__ as worker_main  # loaded, and warmed up, once for every worker

    worker_main.warm_up()
    if os.uname().machine in seccomp.TABLES:
        seccomp.program(os.uname().machine)  # built once: every forked box inherits it

    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.sendall(b"ready")
    serve_forever(sock)
    os._exit(0)  # the judge waits for this end: no tearing torch's modules down first


# ----------------------------------------------------------------------------- the judge's side


@dataclass
class ForkedProcess:
    """The judge's view of a forked sandbox, shaped like the `subprocess.Popen` it stands in for."""

    pid: int
    stdout: IO[bytes]
    stderr: IO[bytes]
    _status: int
    returncode: int | None = None
    stdin: None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self._finish()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("zygote child", timeout or 0)
            self._finish()
        assert self.returncode is not None
        return self.returncode

    def _finish(self) -> None:
        data = os.read(self._status, STATUS.size)
        self.returncode = STATUS.unpack(data)[0] if len(data) == STATUS.size else -signal.SIGKILL
        os.close(self._status)


class Zygote:
    """A running zygote; `spawn` is safe to call from several judge threads at once."""

    def __init__(self, start_timeout: float = 60.0) -> None:
        from grader.confine.sandbox_init import ENVIRONMENT

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock, self._lock = ours, threading.Lock()
        # Every forked worker inherits the zygote's memory, command line and environment, so none of them may say
        # anything of the judge: the program comes on stdin, the environment is the workers' fixed one (the
        # judge's would stay on the stack, in /proc/self/environ, whatever a worker does to os.environ), the
        # folder is the root's.
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.PIPE,
            start_new_session=True,
            env=ENVIRONMENT,
            cwd="/",
        )
        theirs.close()
        assert self.process.stdin is not None
        self.process.stdin.write(b"from grader.confine.zygote import main\nmain()\n")
        self.process.stdin.close()
        ours.settimeout(start_timeout)
        if ours.recv(5) != b"ready":
            raise RuntimeError("the worker zygote did not start")
        ours.settimeout(None)

    def spawn(self, init: InitConfig, level: str, request: int, response: int) -> ForkedProcess:
        job: Job = {"init": init, "level": level}
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe()
        fds = [out_w, err_w, request, response, status_w]
        try:
            with self._lock:
                self._sock.sendmsg(
                    [json.dumps(job).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                )
                data = self._sock.recv(STATUS.size, socket.MSG_WAITALL)
        finally:
            for fd in (out_w, err_w, status_w):
                os.close(fd)
        if len(data) != STATUS.size:
            raise RuntimeError("the worker zygote has gone")
        return ForkedProcess(STATUS.unpack(data)[0], os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"), status_r)

    def close(self) -> None:
        self._sock.close()  # the zygote exits on EOF; its children die with it (their death signal)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


if __name__ == "__main__":
    main()
