"""Trusted sandbox entry: set up mounts, limits and identity inside fresh namespaces, then exec the worker.

Run as `python -I -S sandbox_init.py CONFIG_JSON`, usually under `unshare`; standard library only, so it
imports nothing a learner could have touched. Every step that fails aborts with exit status 97 and a line
on stderr: a worker that cannot be confined is never started unconfined.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 38, 1, 24
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


def build_root(config: dict) -> None:
    box = config["box"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    mount("tmpfs", box, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for source, target, read_only in config["binds"]:
        if os.path.exists(source):
            bind(source, box + target, read_only)
    for target in config["hide"]:
        if os.path.isdir(box + target):
            tmpfs(box + target, "size=4k,mode=0555", read_only=True)
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


def drop_capabilities() -> None:
    """Empty the bounding set: whatever uid runs next, execve grants it no capability."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            fail(f"could not drop capability {cap}")


def set_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def drop_identity(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        fail("could not drop to the worker uid")


def main() -> None:
    config = json.loads(sys.argv[1])
    if config.get("die_with_parent"):
        _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    if config.get("box"):
        build_root(config)
    else:
        os.chdir(config["cwd"])
    if config.get("box"):
        drop_capabilities()
    if config.get("drop_uid"):
        drop_identity(config["uid"], config["gid"])
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail("prctl(PR_SET_NO_NEW_PRIVS)")
    set_limits(config["rlimits"])
    os.execve(config["argv"][0], config["argv"], config["env"])


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - report and refuse to run unconfined
        fail(f"{type(exc).__name__}: {exc}")
