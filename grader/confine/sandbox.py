"""Start a worker confined as far as this machine allows, and say exactly what was in force.

Three levels, strongest first (docs/threat-model.md says what each one defends and what it does not):
- `namespaces+uid` (the grader runs as root): fresh PID, mount, network, IPC and UTS namespaces; a private
  root holding only the system libraries, Python, the worker's own files and tmpfs scratch and /tmp, with the
  grader, the project and a minimal /etc; an unprivileged uid per worker slot; rlimits; a control group per
  slot bounding the memory and process count of all its processes together, where the machine offers one.
  The whole PID namespace dies with the worker.
- `user-namespace` (an ordinary user whose kernel allows user namespaces): the same box, but the worker keeps
  the caller's uid, mapped to a capability-less root inside its namespace, and has no control group.
- `limits-only`: rlimits, a private scratch folder and a subreaper that kills what the worker leaves behind;
  no filesystem or network isolation, and nothing stops a learner who attacks the grading user's processes.
At every level the worker starts from a fixed environment, with keyrings of its own, under the system call
filter of `seccomp.py`; what a slot's uid leaves in folders every user may write is removed with the box.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import os
import platform
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from grader.confine import cgroups, seccomp
from grader.confine.intake import Submission
from grader.confine.sandbox_init import ENVIRONMENT, InitConfig, _libc
from grader.model.report import Isolation
from grader.model.spec import Limits
from grader.paths import PROJECT_ROOT
from grader.worker.messages import WorkerConfig

Level = Literal["namespaces+uid", "user-namespace", "limits-only"]
GRADER_PACKAGE = Path(__file__).resolve().parents[1]
WORKER_SOURCE = GRADER_PACKAGE / "worker"
INIT_SCRIPT = Path(__file__).resolve().with_name("sandbox_init.py")
DISTRIBUTION = "paperleet"
SLOT_UID_BASE = 61000
MAX_SLOTS = 256
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
# /etc holds the host's configuration (package indexes, keys, the grader's own settings); the box gets only
# what the dynamic linker and the C library need, plus a passwd and group written for it
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf")
NAMESPACES = ["pid", "mount", "net", "ipc", "uts"]
BOX_TMPFS_MB = 64  # each of /scratch, /tmp and /dev/shm; memory-backed, counted in the slot's control group
# Where a slot's uid can leave files without namespaces: the host's folders that every user may write
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock", "/var/lock", "/var/crash")


def _probe(args: list[str]) -> bool:
    try:
        return subprocess.run(args, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.cache
def best_level() -> Level:
    forced = os.environ.get("PAPERLEET_ISOLATION")
    if forced in ("namespaces+uid", "user-namespace", "limits-only"):
        return forced  # type: ignore[return-value]
    unshare = shutil.which("unshare")
    if unshare and os.geteuid() == 0 and _probe([unshare, "--pid", "--fork", "--mount", "--net", "true"]):
        return "namespaces+uid"
    if unshare and _probe([unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount", "--net", "true"]):
        return "user-namespace"
    return "limits-only"


@functools.cache
def _die_with_judge() -> list[str]:
    """A prefix that kills `unshare` if the judge thread that started it dies (util-linux setpriv)."""
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
    return prefix if prefix and _probe([*prefix, "true"]) else []


def _kernel_counts_nproc_per_namespace() -> bool:
    """Linux 5.14 counts RLIMIT_NPROC per user namespace; before, across all of the caller's processes."""
    try:
        major, minor = (int(part) for part in platform.release().split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 14)


class Slot:
    """An exclusive worker slot (and so a uid of its own), held by a lock file until released."""

    def __init__(self) -> None:
        # slots stand for uids, a resource of the whole machine: every grader must see the same locks, whatever
        # its TMPDIR
        lock_dir = Path("/tmp") / f"paperleet-slots-{os.geteuid()}"
        lock_dir.mkdir(mode=0o700, exist_ok=True)
        info = lock_dir.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise RuntimeError(f"{lock_dir} is not a private folder of this user; remove it")
        for index in range(MAX_SLOTS):
            handle: IO[bytes] = open(lock_dir / f"{index}.lock", "wb")  # held until release()
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            self.index, self._handle = index, handle
            return
        raise RuntimeError(f"all {MAX_SLOTS} worker slots are busy")

    @property
    def uid(self) -> int:
        return SLOT_UID_BASE + self.index

    def release(self) -> None:
        self._handle.close()


@functools.cache
def _site_dirs() -> list[str]:
    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    torch_spec = importlib.util.find_spec("torch")  # where torch lives, without paying for its import
    if torch_spec is not None and torch_spec.origin:
        dirs.add(str(Path(torch_spec.origin).parents[1]))
    return sorted(dirs)


@functools.cache
def _usable_by_anyone() -> bool:
    """Whether any uid may run this Python and the sandbox script: every folder above them searchable by others,
    the files readable (a Python under /root, mode 0700, is not)."""
    paths = [Path(sys.executable), Path(sys.prefix), Path(sys.base_prefix), INIT_SCRIPT, *map(Path, _site_dirs())]
    try:
        for path in {Path(os.path.realpath(p)) for p in paths}:
            if not path.stat().st_mode & stat.S_IROTH:
                return False
            if any(not folder.stat().st_mode & stat.S_IXOTH for folder in path.parents):
                return False
    except OSError:
        return False
    return True


def _all_site_dirs() -> set[str]:
    """Every site folder the box binds: this environment's and the base Python's."""
    base = {"base": sys.base_prefix, "platbase": sys.base_prefix}
    return {*_site_dirs(), sysconfig.get_paths(vars=base)["purelib"], sysconfig.get_paths(vars=base)["platlib"]}


def _installed_graders() -> list[Path]:
    """Copies of the grader package installed into any site folder the box binds."""
    return [Path(site) / "grader" for site in _all_site_dirs() if (Path(site) / "grader").is_dir()]


def _installed_metadata() -> list[Path]:
    """The grader distribution's own records in the site folders: its metadata (which carries the README and
    the list of installed files) and an editable install's finder, which names the project's folder."""
    patterns = (
        f"{DISTRIBUTION}-*.dist-info",
        f"{DISTRIBUTION}.egg-info",
        f"__editable__*{DISTRIBUTION}*",
        f"{DISTRIBUTION}.egg-link",
    )
    return [path for site in _all_site_dirs() for pattern in patterns for path in Path(site).glob(pattern)]


def secrets(submission: Path) -> list[Path]:
    """What no worker may read even where it lies inside a bound tree: the grader, the project (reference,
    known-wrong solutions, hidden seeds, artifacts), the expectations cache and the other submissions."""
    found = [GRADER_PACKAGE, PROJECT_ROOT, submission.parent, *_installed_graders(), *_installed_metadata()]
    found += [Path(os.environ[v]) for v in ("PAPERLEET_ARTIFACTS", "PAPERLEET_CACHE") if os.environ.get(v)]
    return sorted({Path(os.path.realpath(p)) for p in found})


def _uncovered(secret: Path, kept: list[Path]) -> list[Path]:
    """`secret` itself or, where a bound tree lies inside it, every other entry of it, recursively."""
    inner = [k for k in kept if secret in k.parents]
    if not inner:
        return [secret]
    out: list[Path] = []
    for child in sorted(secret.iterdir()):
        if child in inner or child.is_symlink():
            continue  # a bound tree stays visible; a link is harmless when what it points to is covered
        out += _uncovered(child, inner) if any(child in k.parents for k in inner) else [child]
    return out


def masks(binds: list[tuple[str, str, bool]], hidden: Iterable[Path]) -> list[str]:
    """Box paths to cover: each secret inside a bound tree, seen through every bind that shows it."""
    real = [Path(os.path.realpath(source)) for source, _, _ in binds]
    hidden = list(hidden)
    out = set()
    for (_, target, _), source in zip(binds, real, strict=True):
        for secret in hidden:
            if source in secret.parents:
                for path in _uncovered(secret, real):
                    out.add(f"{target.rstrip('/')}/{path.relative_to(source).as_posix()}")
    return sorted(out)


def _python() -> str:
    """This Python, by a path that exists in the box too (no `..` through folders the box leaves out); not
    resolved, since a virtual environment is recognised by the path it was started from."""
    return os.path.normpath(sys.executable)


def _identity_files(uid: int) -> dict[str, str]:
    users = {0: "root", uid: "learner", 65534: "nobody"}
    return {
        "/etc/passwd": "".join(f"{n}:x:{u}:{u}:{n}:/scratch:/usr/sbin/nologin\n" for u, n in users.items()),
        "/etc/group": "".join(f"{n}:x:{u}:\n" for u, n in users.items()),
        "/etc/hostname": "paperleet\n",
        "/etc/hosts": "127.0.0.1 localhost paperleet\n",
    }


@dataclass
class Box:
    """The files one worker may see, prepared by the judge in a private temporary folder."""

    submission: Submission  # read once (`intake.read_submission`); its bytes are what the worker imports
    experiment: Path | None
    limits: Limits
    level: Level
    slot: Slot
    home: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="paperleet-")))
    cgroup: cgroups.Cgroup | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.submission.refusal:
            raise ValueError(f"a refused submission reached the box: {self.submission.refusal}")
        runtime = self.home / "runtime"
        shutil.copytree(WORKER_SOURCE, runtime / "worker", ignore=shutil.ignore_patterns("__pycache__"))
        (runtime / "submission.py").write_bytes(self.submission.data)  # the bytes hashed, never the name again
        if self.experiment is not None:
            shutil.copyfile(self.experiment, runtime / "experiment.py")
        for path in [runtime, *runtime.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (self.home / "box").mkdir(mode=0o755)
        scratch = self.home / "scratch"
        scratch.mkdir(mode=0o700)
        if self.drops_uid and not self.confined:  # the slot's uid works in the host's folders themselves
            self.home.chmod(0o711)
            os.chown(scratch, self.uid, self.uid)
        self.cgroup = cgroups.create(f"slot-{self.slot.index}", self.limits.memory_mb << 20, self.limits.max_processes)

    @property
    def confined(self) -> bool:
        return self.level != "limits-only"

    @property
    def runtime(self) -> str:
        return "/runtime" if self.confined else str(self.home / "runtime")

    @property
    def drops_uid(self) -> bool:
        """Whether the worker runs as the slot's own uid: whenever the grader is root, except in a user namespace
        and where, without a private root, the slot's uid could not even start Python."""
        if os.geteuid() != 0 or self.level == "user-namespace":
            return False
        return self.level == "namespaces+uid" or _usable_by_anyone()

    @property
    def uid(self) -> int:
        """The worker's uid as the host sees it."""
        return self.slot.uid if self.drops_uid else os.geteuid()

    def rlimits(self) -> dict[str, int]:
        mb = 1 << 20
        limits = {
            "RLIMIT_AS": self.limits.memory_mb * mb,
            "RLIMIT_CPU": self.limits.cpu_time_s,
            "RLIMIT_FSIZE": self.limits.file_size_mb * mb,
            "RLIMIT_CORE": 0,
            "RLIMIT_NOFILE": 256,
        }
        if self.drops_uid or (self.level == "user-namespace" and _kernel_counts_nproc_per_namespace()):
            limits["RLIMIT_NPROC"] = self.limits.max_processes  # counted for the slot's uid, or the namespace's
        return limits

    def binds(self) -> list[tuple[str, str, bool]]:
        python_dirs = {sys.base_prefix, sys.prefix, *_site_dirs()}
        binds = [(d, d, True) for d in SYSTEM_DIRS]
        binds += [(f"/etc/{name}", f"/etc/{name}", True) for name in ETC_ENTRIES]
        binds += [(d, d, True) for d in sorted(python_dirs)]
        binds.append((str(self.home / "runtime"), "/runtime", True))
        return binds

    def command(self) -> list[str]:
        """The process to start; it reads `init_config()`, as JSON, on its stdin."""
        prefix: list[str] = []
        unshare = shutil.which("unshare") or "unshare"  # found with the judge's PATH: the box's own is fixed
        if self.level == "namespaces+uid":
            prefix = [
                *_die_with_judge(),
                unshare,
                "--pid",
                "--fork",
                "--kill-child",
                "--mount",
                "--net",
                "--ipc",
                "--uts",
                "--",
            ]
        elif self.level == "user-namespace":
            prefix = [
                *_die_with_judge(),
                unshare,
                "--user",
                "--map-root-user",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount",
                "--net",
                "--ipc",
                "--uts",
                "--",
            ]
        return [*prefix, _python(), "-I", "-S", str(INIT_SCRIPT)]

    def environment(self) -> dict[str, str]:
        """The whole environment of the worker and of every process that starts it: nothing of the judge's."""
        if self.confined:
            return dict(ENVIRONMENT)
        scratch = str(self.home / "scratch")
        return {**ENVIRONMENT, "HOME": scratch, "TMPDIR": scratch}

    def init_config(self, worker: WorkerConfig) -> InitConfig:
        """What the box's init is told: how to build the box, confine itself and start the worker."""
        bootstrap = (
            "import sys, runpy; sys.path.insert(0, sys.argv[1]); sys.argv = [sys.argv[0], sys.argv[2]]; "
            "runpy.run_module('worker', run_name='__main__', alter_sys=True)"
        )
        inside = 0 if self.level == "user-namespace" else self.uid
        init: InitConfig = {
            "argv": [_python(), "-I", "-u", "-c", bootstrap, self.runtime],
            "worker": dict(worker),
            "env": self.environment(),
            "rlimits": self.rlimits(),
            "uid": inside,
            "gid": inside,
            "drop_uid": self.drops_uid,
            "die_with_parent": True,
            "cwd": str(self.home / "scratch"),
            "tmp_mb": BOX_TMPFS_MB,
            "cgroups": self.cgroup.procs_files if self.cgroup else [],
        }
        if self.confined:
            binds = self.binds()
            init["box"] = str(self.home / "box")
            init["binds"] = binds
            init["masks"] = masks(binds, secrets(self.submission.path))
            init["files"] = _identity_files(inside)
        return init

    def isolation(self) -> Isolation:
        limits = {k: float(v) for k, v in self.rlimits().items()}
        if self.cgroup:
            limits.update(
                CGROUP_MEMORY_BYTES=float(self.cgroup.memory_bytes), CGROUP_PIDS=float(self.cgroup.max_processes)
            )
        return Isolation(
            level=self.level,
            uid=self.uid,
            namespaces=NAMESPACES if self.confined else [],
            filesystem=(
                f"private root: system libraries, Python and the worker read-only, a minimal /etc, "
                f"no grader or project files; tmpfs /scratch, /tmp and /dev/shm of {BOX_TMPFS_MB} MB each"
                if self.confined
                else "host filesystem with the grading user's rights; cwd in a scratch folder"
            ),
            limits=limits,
            notes=self._notes(),
            syscall_filter=_syscall_filter(),
        )

    def _notes(self) -> list[str]:
        notes = []
        if self.level == "limits-only" and self.drops_uid:
            notes += [
                "no namespaces: the worker runs as the slot's own uid, with that uid's rights on the host's "
                "files (world-readable ones, the project's included) and network; a subreaper kills what it "
                "leaves running"
            ]
        elif self.level == "limits-only":
            notes += [
                "no namespaces: the worker runs as the grading user, can read and write what that user can, "
                "reach the network and signal the grader's own processes; a subreaper kills what it leaves "
                "running unless it kills the subreaper first"
            ]
        if self.level == "user-namespace":
            notes += [
                "the worker keeps the grading user's uid outside its namespace (a root without "
                "capabilities inside): within the box it reads what that user can read"
            ]
            if "RLIMIT_NPROC" not in self.rlimits() or os.geteuid() == 0:
                bound = "the control group's" if self.cgroup else "none"
                notes += [f"RLIMIT_NPROC is not enforced for this caller; the process count's bound: {bound}"]
        if self.cgroup is None:
            notes += [
                "no control group: memory and process limits hold per process, not for all of the "
                "worker's processes together"
            ]
        if not seccomp.kernel_has_seccomp(_libc):
            notes += [
                "no system call filter: this kernel has no seccomp, so the worker may make any system call, "
                "keyrings, SysV and POSIX IPC, ptrace and new namespaces included"
            ]
        return notes

    def cleanup(self) -> None:
        """Remove the box and whatever its worker left: its control group, and, for a slot's uid, its files in
        the host's shared folders, so the slot's next submission starts from nothing. Call before releasing the
        slot, whose next holder would otherwise find its own processes and files removed."""
        if self.cgroup is not None:
            self.cgroup.kill_all()
            self.cgroup.remove()
        if self.drops_uid:
            remove_files_of(self.uid, SHARED_WRITABLE)
        shutil.rmtree(self.home, ignore_errors=True)


@functools.cache
def _syscall_filter() -> str:
    if not seccomp.kernel_has_seccomp(_libc):
        return "none: this kernel has no seccomp"
    return seccomp.summary(platform.machine())


def remove_files_of(uid: int, roots: Iterable[str]) -> list[str]:
    """Remove every entry `uid` owns below `roots` (a folder with all it holds), descending only into folders
    others may write to: the only places, besides its own folders, where `uid` can have created anything.
    Links are removed, never followed."""
    removed: list[str] = []
    folders, seen = [Path(root) for root in roots], set()
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid == uid:
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    Path(entry.path).unlink(missing_ok=True)
                removed.append(entry.path)
            elif stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002 and (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                folders.append(Path(entry.path))
    return removed
