"""Trusted sandbox entry: build the box, give up every privilege, and run the worker below an init that ends it.

Run as `python -I -S sandbox_init.py` with its JSON config (an `InitConfig`, checked by `read_config`) on stdin
(never on a command line, which any process can read), usually under `unshare`. Standard library only, so it imports
nothing a learner could have touched. Every step that fails aborts with exit status 97 and a line on stderr: a
worker that cannot be confined is never started unconfined. It then forks the worker and stays behind as its init
(PID 1 of the namespace, or a child subreaper without one): it reaps orphans and, when the worker ends or the judge
sends SIGTERM, kills everything the worker left running. Both run under the system call filter of `seccomp.py`, with
keyrings of their own and the fixed ENVIRONMENT, whatever the judge's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

if __package__:
    from grader.confine import seccomp
else:  # run as a script, where -I puts no folder on sys.path: this one goes last, behind the standard library
    sys.path.append(os.path.dirname(__file__))
    import seccomp  # type: ignore[no-redef,import-not-found]  # the same module, found on the path just set

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 38, 1, 24
PR_SET_CHILD_SUBREAPER, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, PR_SET_DUMPABLE = 36, 47, 4, 4
CAPABILITY_VERSION_3 = 0x20080522
MNT_DETACH = 2
SETUP_FAILED = 97
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR = 1, 7
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5
# The whole environment of a worker and of every process that starts one: nothing of the judge's own reaches a
# worker, on the stack where the kernel put it at exec (/proc/self/environ) or anywhere else
ENVIRONMENT = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/scratch",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",  # the fourth the worker sets itself: a forked worker sees all four as an exec'd one
}


class InitConfig(TypedDict):
    """What the judge tells the init of one box (`Box.init_config` builds it)."""

    argv: list[str]  # the worker's command; its config goes last, as JSON
    worker: dict[str, Any]  # the worker's config (`grader.worker.messages.WorkerConfig`, which the worker checks)
    env: dict[str, str]  # the worker's whole environment
    rlimits: dict[str, int]  # resource name (RLIMIT_*) -> soft and hard limit
    uid: int  # the worker's uid and gid inside the box
    gid: int
    drop_uid: bool  # whether to become `uid` (the grader runs as root)
    die_with_parent: bool
    cwd: str  # where the worker starts without a private root
    tmp_mb: int  # the size of each tmpfs of the box
    cgroups: list[str]  # cgroup.procs files to join before anything else
    box: NotRequired[str]  # with namespaces: the folder that becomes the root, and what it holds
    binds: NotRequired[list[tuple[str, str, bool]]]  # source, target in the box, read-only
    masks: NotRequired[list[str]]  # box paths covered by an empty folder or /dev/null
    files: NotRequired[dict[str, str]]  # box path -> text, written for the box alone


FIELDS: dict[str, Any] = {
    "argv": [str],
    "worker": dict,
    "env": {str: str},
    "rlimits": {str: int},
    "uid": int,
    "gid": int,
    "drop_uid": bool,
    "die_with_parent": bool,
    "cwd": str,
    "tmp_mb": int,
    "cgroups": [str],
}
BOX_FIELDS: dict[str, Any] = {"box": str, "binds": [[str, str, bool]], "masks": [str], "files": {str: str}}


def _conforms(value: Any, shape: Any) -> bool:
    """Whether `value` has `shape`: a type, [item shape] for a list, [a, b, c] for a fixed row, {key: value}."""
    if isinstance(shape, type):
        return type(value) is shape
    if isinstance(shape, dict):
        ((key, item),) = shape.items()
        return type(value) is dict and all(_conforms(k, key) and _conforms(v, item) for k, v in value.items())
    if type(value) is not list:
        return False
    if len(shape) == 1:
        return all(_conforms(v, shape[0]) for v in value)
    return len(value) == len(shape) and all(_conforms(v, s) for v, s in zip(value, shape, strict=True))


def check_config(raw: Any) -> InitConfig:
    """`raw` as an InitConfig: every field present with its type, the box's fields all or none; ValueError
    otherwise, before any step of the setup is taken."""
    if type(raw) is not dict:
        raise ValueError("the config is not an object")
    boxed = "box" in raw
    fields = {**FIELDS, **BOX_FIELDS} if boxed else FIELDS
    unknown = set(raw) - set(fields)
    if unknown:
        raise ValueError(f"unknown config fields {sorted(unknown)}")
    for name, shape in fields.items():
        if name not in raw or not _conforms(raw[name], shape):
            raise ValueError(f"config field {name!r} is missing or not of the expected type")
    return raw  # type: ignore[return-value]


try:
    _libc = ctypes.CDLL("libc.so.6", use_errno=True)  # glibc; find_library would spawn ldconfig
except OSError:
    _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def fail(message: str) -> None:
    os.write(2, f"sandbox setup failed: {message}\n".encode())
    os._exit(SETUP_FAILED)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    args = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    if _libc.mount(args[0], args[1], args[2], ctypes.c_ulong(flags), args[3]) != 0:
        errno = ctypes.get_errno()
        fail(f"mount {source} -> {target} ({fstype}): {os.strerror(errno)}")


def _locked_flags(path: str) -> int:
    """Flags an unprivileged remount must keep (nosuid, nodev, noexec of the source mount)."""
    st = os.statvfs(path)
    flags = 0
    for st_flag, ms_flag in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC)):
        if st.f_flag & st_flag:
            flags |= ms_flag
    return flags


def bind(source: str, target: str, read_only: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    elif not os.path.lexists(target):  # a file to cover already is its own mount point (and may be read-only)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | _locked_flags(source))


def tmpfs(target: str, options: str, read_only: bool = False) -> None:
    os.makedirs(target, exist_ok=True)
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0), options)


def mask(target: str) -> None:
    """Cover a secret inside a bound tree: an empty read-only folder, or /dev/null over a file."""
    if os.path.isdir(target):
        tmpfs(target, "size=4k,mode=0555", read_only=True)
    elif os.path.lexists(target):
        bind("/dev/null", target, read_only=True)


def build_root(config: InitConfig) -> None:
    box = config["box"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    mount("tmpfs", box, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    # /tmp first: a Python or project that lives under /tmp is then bound inside it, not hidden beneath it
    tmpfs(box + "/tmp", f"size={config['tmp_mb']}m,mode=1777")
    for source, target, read_only in config["binds"]:
        if os.path.exists(source):
            bind(source, box + target, read_only)
    for target in config["masks"]:
        mask(box + target)
    for target, text in config["files"].items():  # /etc/passwd and friends, written for the box alone
        os.makedirs(os.path.dirname(box + target), exist_ok=True)
        with open(box + target, "w") as handle:
            handle.write(text)
    owner = f"uid={config['uid']},gid={config['gid']}"
    tmpfs(box + "/scratch", f"size={config['tmp_mb']}m,mode=0700,{owner}")
    tmpfs(box + "/dev", "size=64k,mode=0755")
    for device in ("null", "zero", "random", "urandom"):
        # the host's own inodes, shared with every box: read-only, so no box changes their times (`touch
        # /dev/null`) for another to see; writing to a device still works through a read-only mount
        bind(f"/dev/{device}", f"{box}/dev/{device}", read_only=True)
    tmpfs(box + "/dev/shm", f"size={config['tmp_mb']}m,mode=1777")
    os.makedirs(box + "/proc", exist_ok=True)
    # hidepid=2: a process the worker may not ptrace (its init, which is not dumpable) is not even listed
    mount("proc", box + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    mount(None, box, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    enter_root(box)
    os.chdir("/scratch")
    socket.sethostname("paperleet")  # the UTS namespace is private; the host's name is none of the worker's business


def enter_root(box: str) -> None:
    """Make `box` the root and detach the old one, so even a process with capabilities cannot climb out."""
    os.chdir(box)
    number = seccomp.numbers(os.uname().machine)["pivot_root"] if os.uname().machine in seccomp.TABLES else None
    if number is None:  # glibc has no wrapper
        os.chroot(".")
        return
    if _libc.syscall(number, b".", b".") != 0:
        fail(f"pivot_root: {os.strerror(ctypes.get_errno())}")
    if _libc.umount2(b".", MNT_DETACH) != 0:
        fail(f"umount of the old root: {os.strerror(ctypes.get_errno())}")
    os.chdir("/")


def join_cgroups(procs_files: list[str]) -> None:
    """Enter the slot's control groups first, so every process the worker ever starts is counted there."""
    for path in procs_files:
        try:
            with open(path, "w") as handle:
                handle.write("0")  # 0: the writing process itself
        except OSError as exc:
            fail(f"could not join the control group {path}: {exc}")


def drop_capabilities() -> None:
    """Empty the bounding set: whatever uid runs next, execve grants it no capability."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            fail(f"could not drop capability {cap}")


def clear_capabilities() -> None:
    """Empty the ambient, inheritable, permitted and effective sets, the last way a capability survives execve."""
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two zeroed {effective, permitted, inheritable} words
    if _libc.capset(header, data) != 0:
        fail(f"capset: {os.strerror(ctypes.get_errno())}")


def set_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def drop_identity(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        fail("could not drop to the worker uid")


def own_keyrings(slot_uid: bool) -> None:
    """A fresh session keyring, never the judge's, whose keys its holder could read whatever their owner; for a
    slot's own uid, empty user keyrings too, whatever an earlier worker of the slot left there (keyrings live as
    long as the kernel). Best effort: the filter refuses every keyring call to the worker anyway."""
    number = seccomp.numbers(os.uname().machine).get("keyctl") if os.uname().machine in seccomp.TABLES else None
    if number is None:
        return
    _libc.syscall(ctypes.c_long(number), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None)
    for keyring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING) if slot_uid else ():
        _libc.syscall(ctypes.c_long(number), ctypes.c_long(KEYCTL_CLEAR), ctypes.c_long(keyring))


def filter_system_calls() -> None:
    """The filter of seccomp.py, or no worker at all; only a kernel without seccomp goes on without one, which
    the report's isolation record says."""
    if not seccomp.kernel_has_seccomp(_libc):
        return
    try:
        seccomp.install(_libc)
    except OSError as exc:
        fail(f"could not install the system call filter: {exc.strerror or exc}")


def confine(config: InitConfig, parent: int | None, death_signal: int = signal.SIGKILL) -> None:
    """Give up every privilege, so that what runs next is no stronger than the worker, and get `death_signal`
    when the parent dies."""
    privileged = bool(config.get("box")) or os.geteuid() == 0
    if privileged:
        drop_capabilities()
    if config.get("drop_uid"):
        drop_identity(config["uid"], config["gid"])
    if privileged:
        clear_capabilities()
    own_keyrings(slot_uid=bool(config.get("drop_uid")))
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail("prctl(PR_SET_NO_NEW_PRIVS)")
    _libc.prctl(PR_SET_PDEATHSIG, death_signal, 0, 0, 0)  # again: a change of uid clears it
    filter_system_calls()
    if parent is not None and os.getppid() != parent:
        os._exit(SETUP_FAILED)  # the parent died before that


# ----------------------------------------------------------------------------- the box's init


def _children() -> list[int]:
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except (OSError, ValueError):
        return []


def kill_descendants(whole_namespace: bool) -> None:
    """SIGKILL and reap every descendant. In a PID namespace kill(-1) reaches all of them at once; without
    one, each orphaned grandchild becomes the subreaper's child and is killed in a later round."""
    deadline = time.monotonic() + 5
    while True:
        if whole_namespace:
            try:
                os.kill(-1, signal.SIGKILL)  # every process of the namespace but its init
            except ProcessLookupError:
                pass
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.005)
        except ChildProcessError:
            return


class Stop(BaseException):
    """The judge asked the init to end the worker (SIGTERM)."""


def _stop(signum: int, frame: object) -> None:
    raise Stop()


def run(config: InitConfig, serve: Callable[[], None] | None = None) -> None:
    """Fork the worker and stay behind as its init: reap orphans while it runs; when it ends, or the judge
    sends SIGTERM, kill everything it left and exit with its status (a signal's death reads as 128 + N).

    The worker execs `config["argv"]` with its config last, or, forked from a process that has imported it
    already, calls `serve`.
    """
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:  # without a PID namespace, orphans come here
        fail("prctl(PR_SET_CHILD_SUBREAPER)")
    init = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # no Stop before the wait loop is ready for it
    worker = os.fork()
    if worker == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        confine(config, parent=init)
        set_limits(config["rlimits"])
        if serve is not None:
            os.environ.clear()
            os.environ.update(config["env"])
            serve()
            os._exit(0)
        os.execve(config["argv"][0], [*config["argv"], json.dumps(config["worker"])], config["env"])
    # The parent (unshare, or the judge) lives outside any PID namespace. Without a namespace to take the
    # worker's descendants along, the judge's death must reach the handler that kills them: SIGTERM.
    confine(config, parent=None, death_signal=signal.SIGKILL if config.get("box") else signal.SIGTERM)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the worker shares our uid; it must not ptrace its init
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the worker's channel must close when the worker dies
    signal.signal(signal.SIGTERM, _stop)
    code = -signal.SIGKILL
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == worker:
                code = os.waitstatus_to_exitcode(status)
                break
    except (Stop, ChildProcessError):
        pass
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    kill_descendants(whole_namespace=bool(config.get("box")))
    os._exit(128 - code if code < 0 else code)


def read_config() -> InitConfig:
    """The config, from stdin, checked; stdin then reads /dev/null, as the worker's always has."""
    config = check_config(json.loads(sys.stdin.buffer.read()))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return config


def main() -> None:
    start(read_config())


def start(config: InitConfig, serve: Callable[[], None] | None = None) -> None:
    """Everything between a fresh (namespaced) process and the running worker; never returns."""
    if config.get("die_with_parent"):
        _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    join_cgroups(config["cgroups"])
    if config.get("box"):
        build_root(config)
    else:
        os.chdir(config["cwd"])
    if os.uname().machine in seccomp.TABLES:
        seccomp.program(os.uname().machine)  # built before the fork: the init and the worker both install it
    run(config, serve)


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # report and refuse to run unconfined
        fail(f"{type(exc).__name__}: {exc}")
