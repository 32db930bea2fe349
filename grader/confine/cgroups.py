"""Per-slot control groups: one memory and one process budget for all of a worker's processes together.

rlimits bound each process alone (64 processes of 4 GiB each are still 256 GiB); a control group bounds
their sum, tmpfs pages included. Only root can create one here. Both the unified hierarchy (cgroup v2) and
separate v1 `memory` and `pids` hierarchies are understood; where neither can be written the sandbox goes
on without one and its isolation record says so.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

GROUP = "paperleet"


@dataclass(frozen=True)
class Cgroup:
    """The control group folders of one worker slot (one for v2, one per controller for v1)."""

    dirs: tuple[Path, ...]
    memory_bytes: int
    max_processes: int

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files:
            try:
                found |= {int(p) for p in Path(path).read_text().split()}
            except (OSError, ValueError):
                pass
        return found

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL whatever is still inside; True once the group is empty."""
        deadline = time.monotonic() + timeout
        while pids := self.pids():
            if time.monotonic() > deadline:
                return False
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        return True

    def remove(self) -> None:
        for directory in self.dirs:
            for _ in range(50):  # the kernel lets go of a group a moment after its last process is reaped
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _mounts() -> list[tuple[str, Path, set[str]]]:
    """(filesystem type, mount point, super options) of every cgroup mount this process sees."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) > 4 and len(rest) > 2 and rest[0] in ("cgroup", "cgroup2"):
            found.append((rest[0], Path(fields[4]), set(rest[2].split(","))))
    return found


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _unified(mount: Path, name: str, memory: int, processes: int) -> Cgroup | None:
    if not {"memory", "pids"} <= set((mount / "cgroup.controllers").read_text().split()):
        return None
    parent = mount / GROUP
    _write(mount / "cgroup.subtree_control", "+memory +pids")
    parent.mkdir(exist_ok=True)
    _write(parent / "cgroup.subtree_control", "+memory +pids")
    slot = parent / name
    slot.mkdir(exist_ok=True)
    _write(slot / "memory.max", str(memory))
    if (slot / "memory.swap.max").exists():
        _write(slot / "memory.swap.max", "0")
    _write(slot / "pids.max", str(processes))
    return Cgroup((slot,), memory, processes)


def _own_path(controller: str) -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path.lstrip("/")
    raise OSError(f"no v1 {controller} hierarchy")


def _legacy(mounts: list[tuple[str, Path, set[str]]], name: str, memory: int, processes: int) -> Cgroup | None:
    points = {c: m for kind, m, options in mounts if kind == "cgroup" for c in ("memory", "pids") if c in options}
    if set(points) != {"memory", "pids"}:
        return None
    # nested under the judge's own groups, so whatever limits already bound the judge bound the worker too
    memory_dir = points["memory"] / _own_path("memory") / GROUP / name
    pids_dir = points["pids"] / _own_path("pids") / GROUP / name
    memory_dir.mkdir(parents=True, exist_ok=True)
    pids_dir.mkdir(parents=True, exist_ok=True)
    memsw = memory_dir / "memory.memsw.limit_in_bytes"  # memory + swap; never below the memory limit
    if memsw.exists():
        _write(memsw, "-1")
    _write(memory_dir / "memory.limit_in_bytes", str(memory))
    if memsw.exists():
        _write(memsw, str(memory))
    _write(pids_dir / "pids.max", str(processes))
    return Cgroup((memory_dir, pids_dir), memory, processes)


def create(name: str, memory_bytes: int, max_processes: int) -> Cgroup | None:
    """A fresh group named `name` with both limits set, or None where this machine offers none."""
    if os.geteuid() != 0:
        return None
    try:
        mounts = _mounts()
        for kind, mount, _ in mounts:
            if kind == "cgroup2" and (group := _unified(mount, name, memory_bytes, max_processes)):
                return group
        return _legacy(mounts, name, memory_bytes, max_processes)
    except OSError:
        return None
