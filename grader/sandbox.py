"""Start a worker confined as far as this machine allows, and say exactly what was in force.

Three levels, strongest first:
- `namespaces+uid` (the grader runs as root): fresh PID, mount, network, IPC and UTS namespaces; a private
  root holding only the system libraries, Python, the worker's own files and tmpfs scratch and /tmp; an
  unprivileged uid per worker slot; rlimits. The whole PID namespace dies with the worker.
- `user-namespace` (an ordinary user whose kernel allows user namespaces): the same, but the worker keeps
  the caller's uid, mapped to a capability-less root inside its namespace.
- `limits-only`: rlimits, a new session and a private scratch folder; no filesystem or network isolation,
  and a process that leaves the session (`setsid`) can outlive the grading.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from .report import Isolation
from .spec import Limits

Level = Literal["namespaces+uid", "user-namespace", "limits-only"]
WORKER_SOURCE = Path(__file__).resolve().parent / "worker"
INIT_SCRIPT = Path(__file__).resolve().parent / "sandbox_init.py"
SLOT_UID_BASE = 61000
MAX_SLOTS = 256
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc")
NAMESPACES = ["pid", "mount", "net", "ipc", "uts"]


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


class Slot:
    """An exclusive worker slot (and so a uid of its own), held by a lock file until released."""

    def __init__(self) -> None:
        lock_dir = Path(tempfile.gettempdir()) / f"paperleet-slots-{os.geteuid()}"
        lock_dir.mkdir(mode=0o700, exist_ok=True)
        for index in range(MAX_SLOTS):
            handle: IO[bytes] = open(lock_dir / f"{index}.lock", "wb")  # noqa: SIM115 - held until release()
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


@dataclass
class Box:
    """The files one worker may see, prepared by the judge in a private temporary folder."""

    submission: Path
    experiment: Path | None
    limits: Limits
    level: Level
    slot: Slot
    home: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="paperleet-")))

    def __post_init__(self) -> None:
        runtime = self.home / "runtime"
        shutil.copytree(WORKER_SOURCE, runtime / "worker", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copyfile(self.submission, runtime / "submission.py")
        if self.experiment is not None:
            shutil.copyfile(self.experiment, runtime / "experiment.py")
        for path in [runtime, *runtime.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (self.home / "box").mkdir(mode=0o755)
        scratch = self.home / "scratch"
        scratch.mkdir(mode=0o700)

    @property
    def confined(self) -> bool:
        return self.level != "limits-only"

    @property
    def runtime(self) -> str:
        return "/runtime" if self.confined else str(self.home / "runtime")

    def rlimits(self) -> dict[str, int]:
        mb = 1 << 20
        limits = {
            "RLIMIT_AS": self.limits.memory_mb * mb,
            "RLIMIT_CPU": self.limits.cpu_time_s,
            "RLIMIT_FSIZE": self.limits.file_size_mb * mb,
            "RLIMIT_CORE": 0,
            "RLIMIT_NOFILE": 256,
        }
        if self.level == "namespaces+uid":
            limits["RLIMIT_NPROC"] = self.limits.max_processes  # counted per uid, and the slot's uid is its own
        return limits

    def binds(self) -> list[tuple[str, str, bool]]:
        python_dirs = {sys.base_prefix, sys.prefix, *_site_dirs()}
        binds = [(d, d, True) for d in SYSTEM_DIRS]
        binds += [(d, d, True) for d in sorted(python_dirs)]
        binds.append((str(self.home / "runtime"), "/runtime", True))
        return binds

    def hidden(self) -> list[str]:
        """Folders inside a bound tree that the worker must still not read (an installed grader package)."""
        hide = []
        for site in _site_dirs():
            package = Path(site) / "grader"
            if package.is_dir() and package.resolve() != WORKER_SOURCE.parent:
                hide.append(str(package))
        return hide

    def command(self, worker_config: dict[str, object]) -> list[str]:
        env = {
            "PATH": "/usr/bin:/bin", "HOME": "/scratch" if self.confined else str(self.home / "scratch"),
            "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
        }
        bootstrap = (
            "import sys, runpy; sys.path.insert(0, sys.argv[1]); sys.argv = [sys.argv[0], sys.argv[2]]; "
            "runpy.run_module('worker', run_name='__main__', alter_sys=True)"
        )
        argv = [sys.executable, "-I", "-u", "-c", bootstrap, self.runtime, json.dumps(worker_config)]
        uid = self.slot.uid if self.level == "namespaces+uid" else os.geteuid()
        init = {
            "argv": argv, "env": env, "rlimits": self.rlimits(), "uid": uid, "gid": uid,
            "drop_uid": self.level == "namespaces+uid", "die_with_parent": True,
            "cwd": str(self.home / "scratch"), "tmp_mb": 64,
        }
        if self.confined:
            init.update(box=str(self.home / "box"), binds=self.binds(), hide=self.hidden())
            if self.level == "user-namespace":
                init["uid"] = init["gid"] = 0
        prefix: list[str] = []
        if self.level == "namespaces+uid":
            prefix = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--net", "--ipc", "--uts", "--"]
        elif self.level == "user-namespace":
            prefix = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount",
                      "--net", "--ipc", "--uts", "--"]
        return [*prefix, sys.executable, "-I", "-S", str(INIT_SCRIPT), json.dumps(init)]

    def isolation(self) -> Isolation:
        notes = []
        if self.level == "limits-only":
            notes.append("no namespaces available: a process that calls setsid can outlive the grading, "
                         "and the worker can read whatever the grading user can read")
        if self.level == "user-namespace":
            notes.append("the worker keeps the caller's uid outside its namespace (no capabilities inside)")
        return Isolation(
            level=self.level,
            uid=self.slot.uid if self.level == "namespaces+uid" else os.geteuid(),
            namespaces=NAMESPACES if self.confined else [],
            filesystem=("private root: system libraries, Python, the worker and the toy experiment read-only; "
                        "tmpfs /scratch and /tmp") if self.confined else "host filesystem; cwd in a scratch folder",
            limits={k: float(v) for k, v in self.rlimits().items()},
            notes=notes,
        )

    def cleanup(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


def current_rlimit(name: str) -> int:
    return resource.getrlimit(getattr(resource, name))[0]
