"""Trusted sandbox entry: set up mounts, limits and identity inside fresh namespaces, then exec the worker.

Run as `python -I -S sandbox_init.py CONFIG_JSON`, usually under `unshare`; standard library only, so it
imports nothing a learner could have touched. Every step that fails aborts with exit status 97 and a line
on stderr: a worker that cannot be confined is never started unconfined. Without namespaces (`reap` in the
config) it stays behind as a child subreaper that kills whatever the worker left running when it ends.
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

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 38, 1, 24
PR_SET_CHILD_SUBREAPER, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 36, 47, 4
CAPABILITY_VERSION_3 = 0x20080522
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers; glibc has no wrapper
SETUP_FAILED = 97

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
    else:
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


def build_root(config: dict) -> None:
    box = config["box"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    mount("tmpfs", box, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
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
    tmpfs(box + "/tmp", f"size={config['tmp_mb']}m,mode=1777")
    tmpfs(box + "/scratch", f"size={config['tmp_mb']}m,mode=0700,{owner}")
    tmpfs(box + "/dev", "size=64k,mode=0755")
    for device in ("null", "zero", "random", "urandom"):
        bind(f"/dev/{device}", f"{box}/dev/{device}", read_only=False)
    tmpfs(box + "/dev/shm", f"size={config['tmp_mb']}m,mode=1777")
    os.makedirs(box + "/proc", exist_ok=True)
    mount("proc", box + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, box, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    enter_root(box)
    os.chdir("/scratch")
    socket.sethostname("paperleet")  # the UTS namespace is private; the host's name is none of the worker's business


def enter_root(box: str) -> None:
    """Make `box` the root and detach the old one, so even a process with capabilities cannot climb out."""
    os.chdir(box)
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is None:
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


def exec_worker(config: dict) -> None:
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail("prctl(PR_SET_NO_NEW_PRIVS)")
    set_limits(config["rlimits"])
    os.execve(config["argv"][0], config["argv"], config["env"])


# ----------------------------------------------------------------------------- without namespaces


def _children() -> list[int]:
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except (OSError, ValueError):
        return []


def kill_descendants() -> None:
    """SIGKILL every child until none is left; as subreaper, each orphaned grandchild becomes a child first."""
    while True:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


class Stop(BaseException):
    """The judge asked the reaper to end the worker (SIGTERM)."""


def _stop(signum: int, frame: object) -> None:
    raise Stop()


def reap(config: dict) -> None:
    """Run the worker as a child and, when it ends or the judge says so, kill everything it left behind."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        fail("prctl(PR_SET_CHILD_SUBREAPER)")
    reaper = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # no Stop before the wait loop is ready for it
    worker = os.fork()
    if worker == 0:
        _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
        if os.getppid() != reaper:
            os._exit(SETUP_FAILED)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.chdir(config["cwd"])
        exec_worker(config)
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
    kill_descendants()
    os._exit(128 - code if code < 0 else code)  # a signal's death reads as 128 + its number, as in a shell


def main() -> None:
    config = json.loads(sys.argv[1])
    if config.get("die_with_parent"):
        _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    if config.get("reap"):
        reap(config)
    join_cgroups(config.get("cgroups", []))
    if config.get("box"):
        build_root(config)
        drop_capabilities()
    else:
        os.chdir(config["cwd"])
    if config.get("drop_uid"):
        drop_identity(config["uid"], config["gid"])
    if config.get("box"):
        clear_capabilities()
    exec_worker(config)


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - report and refuse to run unconfined
        fail(f"{type(exc).__name__}: {exc}")
