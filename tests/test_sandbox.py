"""The sandbox from the inside and the judge's side of the channel: what a worker sees at each level, what it
leaves behind, the masks over secrets, the system call filter, and the frames, pipes and floods the judge must
survive."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import PROBLEM, ROOT

from grader.confine import cgroups, sandbox, seccomp
from grader.confine.intake import read_submission
from grader.confine.sandbox import GRADER_PACKAGE, INIT_SCRIPT, Box, Level, Slot, masks, secrets
from grader.confine.session import CappedStream, WorkerProcess, WorkerTimeout
from grader.confine.zygote import Zygote
from grader.judge.accept import accept_frame, check_tensors
from grader.model.spec import Limits
from grader.paths import PROJECT_ROOT
from grader.worker import protocol
from grader.worker.framing import ProtocolError

HOSTILE = Path(__file__).resolve().parent / "hostile"
LEVELS: list[Level] = ["namespaces+uid", "user-namespace", "limits-only"]
MARKER = "paperleet-sandbox-probe"
PLANTED = "/opt/planted-site"  # where the box shows the planted site folder
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to grant namespaces and slot uids")

# Imported by the worker: reports what it can see and do, then leaves a double-forked daemon behind.
PROBE = r"""
import json, os, socket, subprocess, sys

def readable(path):
    try:
        with open(path, "rb") as handle:
            return bool(handle.read(1))
    except OSError:
        return False

def reaches(address):
    try:
        with socket.create_connection(address, timeout=1):
            return True
    except OSError:
        return False

status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
facts = {
    "uid": os.getuid(), "pid": os.getpid(),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "etc": sorted(os.listdir("/etc")), "root": sorted(os.listdir("/")), "hostname": socket.gethostname(),
    "cap_eff": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
    "loopback": reaches(("127.0.0.1", int(os.environ.get("PROBE_PORT", "22")))),
    "shadow": readable("/etc/shadow"), "planted_secret": readable(SECRET), "planted_visible": readable(VISIBLE),
    "runtime_writable": os.access(os.path.dirname(__file__), os.W_OK),
}
print("FACTS " + json.dumps(facts), flush=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-S", "-c", "import time; time.sleep(60)", MARKER])
    os._exit(0)
os.wait()
"""


def _marked_processes(marker: str = MARKER) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path("/proc", pid, "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in command:
            found.append(pid)
    return found


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site folder bound into the box, holding an installed grader package (a secret) beside a harmless file."""
    site = tmp_path / "site"
    (site / "grader" / "worker").mkdir(parents=True)
    (site / "grader" / "secret.txt").write_text("seeds = [1]\n")
    (site / "visible.txt").write_text("anyone may read this\n")
    for path in [tmp_path, *site.rglob("*"), site]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    monkeypatch.setattr(sandbox, "_installed_graders", lambda: [site / "grader"])
    return site


def inside(level: Level, site: Path, tmp_path: Path) -> dict[str, Any]:
    """Start a worker on the probe at `level`, read what it saw, and close it."""

    class PlantedBox(Box):
        def binds(self) -> list[tuple[str, str, bool]]:
            return [*super().binds(), (str(site), PLANTED, True)]  # not below /tmp, which the box replaces

    submission = tmp_path / "probe.py"
    submission.write_text(
        f"SECRET = '{PLANTED}/grader/secret.txt'\nVISIBLE = '{PLANTED}/visible.txt'\nMARKER = {MARKER!r}\n" + PROBE
    )
    slot = Slot()
    box = PlantedBox(read_submission(submission), None, Limits(), level, slot)
    worker = WorkerProcess(box, ["masked_is_weights"])
    try:
        hello = accept_frame(worker.receive(60))
    finally:
        worker.close()
        box.cleanup()
        slot.release()
    out = worker.stdout.text()
    assert hello.get("op") == "ready", (hello, out, worker.stderr.text())
    line = next(line for line in out.splitlines() if line.startswith("FACTS "))
    return dict(json.loads(line.removeprefix("FACTS ")))


@pytest.mark.e2e
@ROOT_ONLY
@pytest.mark.parametrize("level", LEVELS)
def test_close_leaves_no_process_behind(level: Level, planted: Path, tmp_path: Path) -> None:
    inside(level, planted, tmp_path)
    assert _marked_processes() == []  # the daemon died with its grading, even without a PID namespace


@pytest.mark.e2e
@ROOT_ONLY
def test_namespaces_and_uid_box(planted: Path, tmp_path: Path) -> None:
    facts = inside("namespaces+uid", planted, tmp_path)
    assert sandbox.SLOT_UID_BASE <= facts["uid"] < sandbox.SLOT_UID_BASE + sandbox.MAX_SLOTS
    assert 1 not in facts["pids"] and facts["pids"] == [facts["pid"]]  # its init is hidden, the host invisible
    assert set(facts["etc"]) <= {*sandbox.ETC_ENTRIES, "passwd", "group", "hostname", "hosts"}
    python_tops = {Path(os.path.realpath(p)).parts[1] for p in (sys.base_prefix, sys.prefix)}
    assert set(facts["root"]) <= {
        "usr",
        "lib",
        "lib64",
        "lib32",
        "bin",
        "sbin",
        "etc",
        "opt",
        "runtime",
        "scratch",
        "tmp",
        "dev",
        "proc",
        *python_tops,
    }
    assert facts["hostname"] == "paperleet"
    assert facts["cap_eff"] == "0000000000000000" and facts["no_new_privs"] == "1"
    assert not facts["loopback"] and not facts["shadow"] and not facts["runtime_writable"]
    assert facts["planted_visible"] and not facts["planted_secret"]


@pytest.mark.e2e
@ROOT_ONLY
def test_user_namespace_box(planted: Path, tmp_path: Path) -> None:
    facts = inside("user-namespace", planted, tmp_path)
    assert facts["uid"] == 0  # a root without capabilities, inside its own namespace
    assert facts["cap_eff"] == "0000000000000000" and facts["no_new_privs"] == "1"
    assert set(facts["etc"]) <= {*sandbox.ETC_ENTRIES, "passwd", "group", "hostname", "hosts"}
    assert not facts["loopback"] and not facts["shadow"] and not facts["runtime_writable"]
    assert facts["planted_visible"] and not facts["planted_secret"]


@pytest.mark.e2e
@ROOT_ONLY
def test_limits_only_hides_nothing_but_drops_privileges(planted: Path, tmp_path: Path) -> None:
    facts = inside("limits-only", planted, tmp_path)
    assert 1 in facts["pids"]  # the host's processes, as its threat model says
    assert facts["cap_eff"] == "0000000000000000" and facts["no_new_privs"] == "1"


LINGER = r"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-S", "-c", "import time; time.sleep(60)", MARKER])
    os._exit(0)
os.wait()
time.sleep(60)
"""


def _wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.e2e
@ROOT_ONLY
@pytest.mark.parametrize("level", ["namespaces+uid", "limits-only"])
def test_a_judge_that_dies_takes_its_workers_along(level: Level, tmp_path: Path) -> None:
    marker = f"paperleet-sandbox-linger-{level}"
    submission = tmp_path / "linger.py"
    submission.write_text(f"MARKER = {marker!r}\n" + LINGER)
    judge = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grader",
            "grade",
            str(submission),
            "--problem",
            PROBLEM,
            "--out",
            str(tmp_path / "out"),
            "--import-timeout",
            "100",
        ],
        cwd=ROOT,
        env={**os.environ, "PAPERLEET_ISOLATION": level},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _wait_for(lambda: _marked_processes(marker), 60), "the worker never started its daemon"
    finally:
        judge.kill()
        judge.wait()
    assert _wait_for(lambda: not _marked_processes(marker), 15), _marked_processes(marker)


# ----------------------------------------------------------------------------- an ordinary user


def _needs_for_python() -> list[Path]:
    return sorted({Path(os.path.realpath(p)) for p in (sys.base_prefix, sys.prefix, ROOT)})


def _as_nobody(command: list[str], env: dict[str, str], stage: Path) -> list[str]:
    """`command` as uid 65534 in a private mount namespace where the folders Python and the project need are
    reachable, even below a folder closed to others (a Python under /root, mode 0700)."""
    script = ["set -e"]
    for index, need in enumerate(_needs_for_python()):
        closed = next((f for f in reversed(need.parents) if not f.stat().st_mode & 0o001), None)
        if closed is None:
            continue
        script += [
            f"mkdir -p {stage}/{index}",
            f"mount --bind {need} {stage}/{index}",
            f"mountpoint -q {closed} && [ -e {closed}/.paperleet-open ] || "
            f"{{ mount -t tmpfs -o mode=0755,size=1m tmpfs {closed} && touch {closed}/.paperleet-open; }}",
            f"mkdir -p {need}",
            f"mount --bind {stage}/{index} {need}",
        ]
    assignments = [f"{k}={v}" for k, v in env.items()]
    script.append(
        shlex.join(
            ["exec", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "-i", *assignments, *command]
        )
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)]


@pytest.fixture(scope="module")
def as_nobody() -> Iterator[dict[str, Any]]:
    """A small batch graded by an ordinary user (uid 65534): the level it got and every report."""
    if os.geteuid() != 0 or not (shutil.which("setpriv") and shutil.which("unshare")):
        pytest.skip("needs root to become an ordinary user, and util-linux's setpriv and unshare")
    with tempfile.TemporaryDirectory(prefix="paperleet-nobody-", dir="/tmp") as name:  # pytest's is root's alone
        home = Path(name)
        home.chmod(0o777)
        yield _grade_as_nobody(home)


def _grade_as_nobody(home: Path) -> dict[str, Any]:
    folder, out = home / "submissions", home / "out"
    folder.mkdir(mode=0o755)
    for name in ("honest_correct.py", "read_parent_folders.py", "outlive_double_fork_daemon.py"):
        shutil.copyfile(HOSTILE / name, folder / name)
        (folder / name).chmod(0o644)
    folder.chmod(0o755)
    env = {
        "HOME": str(home),
        "MPLCONFIGDIR": str(home / "mpl"),
        "PAPERLEET_CACHE": str(home / "cache"),
        "PAPERLEET_ARTIFACTS": str(home / "artifacts"),
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
    python = [sys.executable, "-m", "grader"]
    stage = home / "stage"
    probe = subprocess.run(
        _as_nobody(
            [sys.executable, "-c", "from grader.confine.sandbox import best_level; print(best_level())"], env, stage
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot run Python as an ordinary user here: {probe.stderr[-300:]}")
    command = [
        *python,
        "grade-all",
        "--problem",
        PROBLEM,
        "--submissions",
        str(folder),
        "--out",
        str(out),
        "--jobs",
        "2",
        "--budget",
        "60",
    ]
    result = subprocess.run(_as_nobody(command, env, stage), cwd=ROOT, capture_output=True, text=True, timeout=600)
    time.sleep(4)  # a surviving daemon would show by now
    reports = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/report.json")}
    return {"level": probe.stdout.strip(), "result": result, "reports": reports, "strays": _hostile_processes()}


def _hostile_processes() -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path("/proc", pid, "cmdline").read_bytes()
        except OSError:
            continue
        if b"paperleet-hostile" in command:
            found.append(pid)
    return found


@pytest.mark.e2e
def test_an_ordinary_user_grades_confined(as_nobody: dict[str, Any]) -> None:
    reports, level = as_nobody["reports"], as_nobody["level"]
    assert as_nobody["result"].returncode == 0, as_nobody["result"].stderr[-2000:]
    assert {r["isolation"]["level"] for r in reports.values()} == {level}
    assert {r["isolation"]["uid"] for r in reports.values()} == {65534}
    assert reports["honest_correct"]["score"] == 100
    assert reports["honest_correct"]["isolation"]["syscall_filter"].startswith("seccomp allow-list")
    assert as_nobody["strays"] == []  # the daemon died with its grading
    if level == "user-namespace":
        assert reports["read_parent_folders"]["score"] == 100
        assert "LEAKED" not in reports["read_parent_folders"]["stdout"]
    else:  # no user namespaces for this user: the report must say the worker read what the user can
        assert level == "limits-only"
        assert any("can read" in note for note in reports["honest_correct"]["isolation"]["notes"])


# ----------------------------------------------------------------------------- masks over secrets


def test_an_installed_grader_package_is_masked(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "grader" / "worker").mkdir(parents=True)
    (site / "torch").mkdir()
    assert masks([(str(site), str(site), True)], [site / "grader"]) == [f"{site}/grader"]


def test_a_bound_tree_inside_a_secret_stays_visible(tmp_path: Path) -> None:
    usr = tmp_path / "usr"
    project = usr / "share" / "project"
    for name in ("reference", "grader", ".venv/lib", "submissions"):
        (project / name).mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    binds = [(str(usr), "/usr", True), (str(project / ".venv"), str(project / ".venv"), True)]
    assert masks(binds, [project]) == [
        f"/usr/share/project/{n}" for n in ("grader", "pyproject.toml", "reference", "submissions")
    ]


def test_every_bind_that_shows_a_secret_is_masked(tmp_path: Path) -> None:
    (tmp_path / "usr" / "lib" / "python3" / "grader").mkdir(parents=True)
    (tmp_path / "lib").symlink_to(tmp_path / "usr" / "lib")
    binds = [(str(tmp_path / "usr"), "/usr", True), (str(tmp_path / "lib"), "/lib", True)]
    secret = tmp_path / "usr" / "lib" / "python3" / "grader"
    assert masks(binds, [secret]) == ["/lib/python3/grader", "/usr/lib/python3/grader"]


def test_secrets_name_the_grader_the_project_and_the_other_submissions(tmp_path: Path) -> None:
    submission = tmp_path / "learners" / "alice.py"
    named = secrets(submission)
    for path in (GRADER_PACKAGE, PROJECT_ROOT, submission.parent):
        assert Path(os.path.realpath(path)) in named


def test_slot_locks_are_machine_wide(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    slot = Slot()
    try:
        assert slot._handle.name.startswith(f"/tmp/paperleet-slots-{os.geteuid()}/")
    finally:
        slot.release()


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_says_what_it_leaves_undefended(level: Level, tmp_path: Path) -> None:
    submission = tmp_path / "s.py"
    submission.write_text("")
    slot = Slot()
    box = Box(read_submission(submission), None, Limits(), level, slot)
    try:
        isolation = box.isolation()
    finally:
        box.cleanup()
        slot.release()
    assert isolation.level == level
    assert isolation.syscall_filter.startswith("seccomp allow-list")
    assert isolation.namespaces == ([] if level == "limits-only" else ["pid", "mount", "net", "ipc", "uts"])
    assert set(isolation.limits) >= {"RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE"}
    if level != "namespaces+uid" or box.cgroup is None:
        assert isolation.notes  # anything short of the full box is spelled out


# ----------------------------------------------------------------------------- the channel


def _frame(message: dict[str, Any]) -> bytes:
    return protocol.encode(message)[8:]


def test_a_frame_claiming_more_than_it_holds_is_refused_before_allocating() -> None:
    """The earlier format's zip bomb, in this one: a header that claims a 256 MiB tensor over a few bytes."""
    head = b'{"D":[["op","ready"],["x",{"X":["uint8",[268435456],[1],0,268435456]}]]}'
    payload = protocol.MAGIC + protocol.HEAD.pack(len(head)) + head + bytes(16)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ProtocolError, match="more bytes than the frame holds"):
        accept_frame(payload)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB: nothing was allocated


def test_what_the_worker_writes_passes() -> None:
    message: dict[str, Any] = {"op": "observed", "output": {"kind": "tensor", "value": torch.randn(64, 64)}}
    accepted = accept_frame(_frame(message))
    assert torch.equal(accepted["output"]["value"], message["output"]["value"])


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")  # torch deprecates the quantized tensor refused here
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.zeros(3, 3).to_sparse(),
        lambda: torch.zeros(3, device="meta"),
        lambda: torch.quantize_per_tensor(torch.zeros(3), 0.1, 0, torch.quint8),
    ],
    ids=["sparse", "meta", "quantized"],
)
def test_only_dense_tensors_cross_to_the_judge(make: Any) -> None:
    with pytest.raises(ProtocolError, match="only dense tensors"):
        check_tensors({"op": "observed", "output": {"kind": "tensor", "value": make()}})


def test_an_endless_frame_is_refused() -> None:
    with pytest.raises(ProtocolError, match="values in one frame"):
        check_tensors({"items": list(range(1 << 17))})


class _Exited:
    """Stands in for a worker process that has already ended."""

    def wait(self, timeout: float | None = None) -> int:
        return 0


@pytest.fixture
def silent_worker() -> Iterator[WorkerProcess]:
    """A worker handle whose other end never reads a request nor writes an answer."""
    worker = WorkerProcess.__new__(WorkerProcess)
    request_read, worker._request_write = os.pipe()
    worker._response_read, response_write = os.pipe()
    os.set_blocking(worker._request_write, False)
    worker.process = _Exited()  # type: ignore[assignment]
    worker.max_frame = 1 << 20
    yield worker
    for fd in (request_read, worker._request_write, worker._response_read, response_write):
        os.close(fd)


def test_a_worker_that_stops_reading_cannot_block_the_judge(silent_worker: WorkerProcess) -> None:
    started = time.monotonic()
    with pytest.raises(WorkerTimeout):
        silent_worker.send({"kwargs": {"x": torch.zeros(1 << 20)}}, timeout=0.5)  # 4 MiB: more than a pipe holds
    assert time.monotonic() - started < 2


def test_a_worker_that_never_answers_times_out(silent_worker: WorkerProcess) -> None:
    started = time.monotonic()
    with pytest.raises(WorkerTimeout):
        silent_worker.receive(timeout=0.5)
    assert time.monotonic() - started < 2


def test_a_flood_is_drained_to_its_end_and_capped() -> None:
    read_end, write_end = os.pipe()
    stream = CappedStream(os.fdopen(read_end, "rb", buffering=0), 4096)
    writer = threading.Thread(target=lambda: [os.write(write_end, bytes(1 << 20)) for _ in range(64)])
    writer.start()
    writer.join(timeout=20)
    assert not writer.is_alive()  # the writer never blocked for long on a full pipe
    os.close(write_end)
    text = stream.text()
    assert len(text.split("\n[... ")[0]) == 4096
    assert stream.dropped == (64 << 20) - 4096


# ----------------------------------------------------------------------------- control groups


def test_a_unified_hierarchy_gets_one_group_with_both_limits(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    group = cgroups._unified(tmp_path, "slot-3", 1 << 30, 64)
    assert group is not None and group.dirs == (tmp_path / "paperleet" / "slot-3",)
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (group.dirs[0] / "memory.max").read_text() == str(1 << 30)
    assert (group.dirs[0] / "pids.max").read_text() == "64"
    assert group.procs_files == [str(tmp_path / "paperleet" / "slot-3" / "cgroup.procs")]


def test_a_unified_hierarchy_without_the_controllers_gets_none(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("hugetlb\n")
    assert cgroups._unified(tmp_path, "slot-3", 1 << 30, 64) is None


# ----------------------------------------------------------------------------- the system call filter


def _run_filter(code: bytes, number: int, arch: int, *args: int) -> int:
    """What the kernel would do with one call: classic BPF, interpreted over a struct seccomp_data."""
    data = struct.pack("<iIQ6Q", number, arch, 0, *[a & (1 << 64) - 1 for a in (*args, 0, 0, 0, 0, 0, 0)[:6]])
    program = [struct.unpack_from("=HBBI", code, at) for at in range(0, len(code), 8)]
    pc = accumulator = 0
    while True:
        op, if_true, if_false, constant = program[pc]
        if op == seccomp.RET:
            return constant
        if op == seccomp.LD_ABS_W:
            accumulator, pc = struct.unpack_from("<I", data, constant)[0], pc + 1
        elif op == seccomp.JA:
            pc += 1 + constant
        else:
            taken = {
                seccomp.JEQ: accumulator == constant,
                seccomp.JGE: accumulator >= constant,
                seccomp.JSET: bool(accumulator & constant),
            }[op]
            pc += 1 + (if_true if taken else if_false)


EPERM, ENOSYS = seccomp.RET_ERRNO | errno.EPERM, seccomp.RET_ERRNO | errno.ENOSYS
NEW_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x20000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
THREAD_FLAGS = 0x3D0F00  # what glibc's pthread_create passes to clone


@pytest.mark.parametrize("machine", sorted(seccomp.TABLES))
def test_the_filter_decides_every_number_as_its_table_says(machine: str) -> None:
    code, arch = seccomp.program(machine), seccomp.AUDIT_ARCH[machine]
    decisions = seccomp.decisions(machine)
    last = max(decisions)
    for number in range(last + 200):
        want = decisions.get(number, EPERM if number <= last else ENOSYS)
        if not isinstance(want, str):
            assert _run_filter(code, number, arch) == want, (machine, number)
    calls = seccomp.numbers(machine)
    assert _run_filter(code, calls["getpid"], arch ^ 0x80000000) == seccomp.RET_KILL_PROCESS  # 32-bit entry
    assert _run_filter(code, calls["keyctl"], 0x40000003) == seccomp.RET_KILL_PROCESS  # i386's number space
    if machine == "x86_64":
        assert _run_filter(code, seccomp.X32_SYSCALL_BIT | calls["keyctl"], arch) == ENOSYS
    for flag in NEW_NAMESPACE_FLAGS.values():
        assert _run_filter(code, calls["clone"], arch, THREAD_FLAGS | flag) == EPERM
    assert _run_filter(code, calls["clone"], arch, THREAD_FLAGS) == seccomp.RET_ALLOW
    assert _run_filter(code, calls["clone"], arch, 0x11 | (1 << 40)) == seccomp.RET_ALLOW  # fork; high half unread
    assert _run_filter(code, calls["clone3"], arch) == ENOSYS
    families = {family: _run_filter(code, calls["socket"], arch, family) for family in (1, 2, 10, 16, 17, 38, 40)}
    assert families == {
        1: seccomp.RET_ALLOW,
        2: seccomp.RET_ALLOW,
        10: seccomp.RET_ALLOW,
        **dict.fromkeys((16, 17, 38, 40), seccomp.RET_ERRNO | errno.EAFNOSUPPORT),
    }
    assert [_run_filter(code, calls["ioctl"], arch, 1, cmd) for cmd in (0x5401, 0x5412, 0x541C)] == [
        seccomp.RET_ALLOW,
        EPERM,
        EPERM,
    ]
    fcntl = {command: _run_filter(code, calls["fcntl"], arch, 3, command) for command in range(2048)}
    assert {command for command, action in fcntl.items() if action != seccomp.RET_ALLOW} == set(
        FCNTL_INODE_COMMANDS.values()
    )
    assert set(fcntl.values()) == {seccomp.RET_ALLOW, EPERM}
    assert [_run_filter(code, calls["fadvise64"], arch, 3, 0, 0, advice) for advice in range(7)] == [
        *[seccomp.RET_ALLOW] * 3,
        *[EPERM] * 4,
    ]
    assert [_run_filter(code, calls["madvise"], arch, 0, 0, advice) for advice in (0, 3, 4, 8, 14, 20, 21, 22)] == [
        *[seccomp.RET_ALLOW] * 5,
        EPERM,
        EPERM,
        seccomp.RET_ALLOW,
    ]
    nowait = seccomp.RET_ERRNO | errno.EOPNOTSUPP
    assert [_run_filter(code, calls["preadv2"], arch, 3, 0, 1, 0, 0, flags) for flags in (0, 1, 8, 9, 0x1F)] == [
        seccomp.RET_ALLOW,
        seccomp.RET_ALLOW,
        nowait,
        nowait,
        nowait,
    ]
    assert [_run_filter(code, calls["personality"], arch, p) for p in (0, 0xFFFFFFFF, 0x0040000, 8)] == [
        seccomp.RET_ALLOW,
        seccomp.RET_ALLOW,
        EPERM,
        EPERM,
    ]


def test_every_call_of_both_tables_is_decided_once_and_on_purpose() -> None:
    denied = {name for names in seccomp.DENIED.values() for name in names.split()}
    kinds = [seccomp.allowed_names(), set(seccomp.ARGUMENT_RULES), seccomp.FALLBACK, denied]
    assert sum(map(len, kinds)) == len(set().union(*kinds))  # no call in two lists
    assert set().union(*kinds) == {name for machine in seccomp.TABLES for name in seccomp.numbers(machine)}
    required = (
        "add_key keyctl request_key ptrace process_vm_readv process_vm_writev bpf perf_event_open "
        "userfaultfd mount umount2 pivot_root chroot move_mount open_tree fsopen fsconfig fsmount fspick "
        "mount_setattr unshare setns kexec_load kexec_file_load init_module finit_module delete_module "
        "io_uring_setup io_uring_enter io_uring_register swapon swapoff reboot acct quotactl "
        "name_to_handle_at open_by_handle_at lookup_dcookie inotify_init1 inotify_add_watch fanotify_init "
        "fanotify_mark flock mincore cachestat readahead"
    )
    assert set(required.split()) <= denied


def test_the_threat_model_lists_the_filter_as_it_is() -> None:
    text = (ROOT / "docs" / "threat-model.md").read_text()
    for reason, names in {**seccomp.ALLOWED, **seccomp.DENIED}.items():
        row = f"| {reason} | " + ", ".join(f"`{name}`" for name in names.split()) + " |"
        assert row in text, row


FCNTL_INODE_COMMANDS = {
    "F_GETLK": 5,
    "F_SETLK": 6,
    "F_SETLKW": 7,
    "F_OFD_GETLK": 36,
    "F_OFD_SETLK": 37,
    "F_OFD_SETLKW": 38,
    "F_SETLEASE": 1024,
    "F_GETLEASE": 1025,
    "F_NOTIFY": 1026,
}
CLONE_SIGHAND = 0x800  # without CLONE_VM the kernel itself answers EINVAL: EPERM can only be the filter's
# (label, call, arguments, errno it must end in). Arguments are chosen, where the kernel allows, so that without
# the filter the call would succeed or fail otherwise (EFAULT, EINVAL, EBADF, ENOENT, ESRCH): EPERM is the filter's.
REFUSED: list[tuple[str, str, Sequence[int | str], str]] = [
    ("add_key", "add_key", ["user", "paperleet-probe", "v", 1, -2], "EPERM"),
    ("keyctl", "keyctl", [0, -4, 0], "EPERM"),
    ("request_key", "request_key", ["user", "paperleet-none", 0, 0], "EPERM"),
    ("ptrace", "ptrace", [3, 0, 0, 0], "EPERM"),
    ("process_vm_readv", "process_vm_readv", [0, 0, 0, 0, 0, 0], "EPERM"),
    ("process_vm_writev", "process_vm_writev", [0, 0, 0, 0, 0, 0], "EPERM"),
    ("bpf", "bpf", [0, 0, 0], "EPERM"),
    ("perf_event_open", "perf_event_open", [0, 0, -1, -1, 0], "EPERM"),
    ("userfaultfd", "userfaultfd", [1], "EPERM"),
    ("mount", "mount", [1, 1, 1, 0, 0], "EPERM"),
    ("umount2", "umount2", ["/", 0xFFFF], "EPERM"),
    ("pivot_root", "pivot_root", [1, 1], "EPERM"),
    ("chroot", "chroot", [1], "EPERM"),
    ("move_mount", "move_mount", [-1, 1, -1, 1, 0xFFFFFFFF], "EPERM"),
    ("open_tree", "open_tree", [-1, 1, 0xFFFFFFFF], "EPERM"),
    ("fsopen", "fsopen", [1, 0xFFFFFFFF], "EPERM"),
    ("fsconfig", "fsconfig", [-1, 0, 0, 0, 0], "EPERM"),
    ("fsmount", "fsmount", [-1, 0xFFFFFFFF, 0], "EPERM"),
    ("fspick", "fspick", [-1, 1, 0xFFFFFFFF], "EPERM"),
    ("mount_setattr", "mount_setattr", [-1, 1, 0xFFFFFFFF, 0, 0], "EPERM"),
    ("unshare", "unshare", [1], "EPERM"),
    ("setns", "setns", [-1, 0], "EPERM"),
    *[
        (f"clone {name}", "clone", [flag | CLONE_SIGHAND, 0, 0, 0, 0], "EPERM")
        for name, flag in NEW_NAMESPACE_FLAGS.items()
    ],
    ("clone3", "clone3", [0, 0], "ENOSYS"),
    ("kexec_load", "kexec_load", [0, 0, 0, 0xFFFFFFFF], "EPERM"),
    ("kexec_file_load", "kexec_file_load", [-1, -1, 0, 0, 0xFFFFFFFF], "EPERM"),
    ("init_module", "init_module", [0, 0, 0], "EPERM"),
    ("finit_module", "finit_module", [-1, 0, 0xFFFFFFFF], "EPERM"),
    ("delete_module", "delete_module", [1, 0], "EPERM"),
    ("io_uring_setup", "io_uring_setup", [0, 0], "EPERM"),
    ("io_uring_enter", "io_uring_enter", [-1, 0, 0, 0, 0, 0], "EPERM"),
    ("io_uring_register", "io_uring_register", [-1, 0, 0, 0], "EPERM"),
    ("swapon", "swapon", [1, 0], "EPERM"),
    ("swapoff", "swapoff", [1], "EPERM"),
    ("reboot", "reboot", [0, 0, 0, 0], "EPERM"),
    ("acct", "acct", [1], "EPERM"),
    ("quotactl", "quotactl", [0, 0, 0, 0], "EPERM"),
    ("name_to_handle_at", "name_to_handle_at", [-1, 1, 0, 0, 0], "EPERM"),
    ("open_by_handle_at", "open_by_handle_at", [-1, 0, 0], "EPERM"),
    ("lookup_dcookie", "lookup_dcookie", [0, 0, 0], "EPERM"),
    ("personality ADDR_NO_RANDOMIZE", "personality", [0x0040000], "EPERM"),
    ("shmget", "shmget", [0, 4096, 0o600], "EPERM"),
    ("msgget", "msgget", [0, 0o600], "EPERM"),
    ("semget", "semget", [0, 1, 0o600], "EPERM"),
    ("mq_open", "mq_open", ["/paperleet-probe", 0, 0, 0], "EPERM"),
    ("sethostname", "sethostname", [1, 0], "EPERM"),
    ("kcmp", "kcmp", [0, 0, 0, 0, 0], "EPERM"),
    ("pidfd_getfd", "pidfd_getfd", [-1, 0, 0], "EPERM"),
    ("process_madvise", "process_madvise", [-1, 0, 0, 0, 0], "EPERM"),
    ("fanotify_init", "fanotify_init", [0, 0], "EPERM"),
    ("vmsplice", "vmsplice", [-1, 0, 0, 0], "EPERM"),
    ("socket AF_NETLINK", "socket", [16, 3, 0], "EAFNOSUPPORT"),
    ("socket AF_PACKET", "socket", [17, 3, 0], "EAFNOSUPPORT"),
    ("ioctl TIOCSTI", "ioctl", [0, 0x5412, "x"], "EPERM"),
    # what another box does to a file both bind: without the filter these answer EBADF, EFAULT or ENOMEM
    ("inotify_init1", "inotify_init1", [0], "EPERM"),
    ("inotify_add_watch", "inotify_add_watch", [-1, "/", 0xFFF], "EPERM"),
    ("inotify_rm_watch", "inotify_rm_watch", [-1, 1], "EPERM"),
    ("fanotify_mark", "fanotify_mark", [-1, 0, 0, -1, 0], "EPERM"),
    ("flock", "flock", [-1, 1], "EPERM"),
    *[(f"fcntl {name}", "fcntl", [-1, command, 0], "EPERM") for name, command in FCNTL_INODE_COMMANDS.items()],
    ("mincore", "mincore", [0, 4096, 0], "EPERM"),
    ("cachestat", "cachestat", [-1, 0, 0, 0], "EPERM"),
    ("readahead", "readahead", [-1, 0, 4096], "EPERM"),
    ("fadvise64 WILLNEED", "fadvise64", [-1, 0, 4096, 3], "EPERM"),
    ("fadvise64 DONTNEED", "fadvise64", [-1, 0, 4096, 4], "EPERM"),
    ("fadvise64 NOREUSE", "fadvise64", [-1, 0, 4096, 5], "EPERM"),
    ("madvise MADV_COLD", "madvise", [0, 4096, 20], "EPERM"),
    ("madvise MADV_PAGEOUT", "madvise", [0, 4096, 21], "EPERM"),
    ("preadv2 RWF_NOWAIT", "preadv2", [-1, 0, 0, 0, 0, 8], "ENOTSUP"),
    ("getpid", "getpid", [], "ok"),  # and what a worker needs still works
    ("personality query", "personality", [0xFFFFFFFF], "ok"),
    ("socket AF_UNIX", "socket", [1, 1, 0], "ok"),
    ("ioctl TCGETS", "ioctl", [0, 0x5401, 0], "ENOTTY"),
    ("fcntl F_GETFD", "fcntl", [0, 1, 0], "ok"),
    ("fadvise64 SEQUENTIAL", "fadvise64", [-1, 0, 4096, 2], "EBADF"),
    ("madvise MADV_DONTNEED", "madvise", [0, 4096, 4], "ENOMEM"),
    ("preadv2 RWF_HIPRI", "preadv2", [-1, 0, 0, 0, 0, 1], "EBADF"),
]
X86_64_REFUSED: list[tuple[str, str, Sequence[int | str], str]] = [
    ("modify_ldt", "modify_ldt", [0, 0, 0], "EPERM"),
    ("iopl", "iopl", [3], "EPERM"),
    ("inotify_init", "inotify_init", [], "EPERM"),
    ("ioperm", "ioperm", [0, 1, 1], "EPERM"),
]

# Imported as a submission: each raw call's outcome, the seccomp mode, threads, a child process and torch at work;
# on x86_64, a child that enters the kernel through i386's door (int 0x80), which the filter must kill.
FILTER_PROBE = r"""
import ctypes, errno, json, mmap, os, signal, subprocess, sys, threading
import torch

libc = ctypes.CDLL(None, use_errno=True)


def call(number, args):
    values = [ctypes.c_char_p(a.encode()) if isinstance(a, str) else ctypes.c_long(a) for a in args]
    return "ok" if libc.syscall(ctypes.c_long(number), *values) >= 0 else errno.errorcode[ctypes.get_errno()]


def i386_entry():
    pid = os.fork()
    if pid == 0:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3]))  # mov eax, 20 (getpid); int 0x80; ret
        ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
        os._exit(0)
    status = os.waitpid(pid, 0)[1]
    return signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else "returned"


seen = {label: call(number, args) for label, number, args in json.loads(CALLS)}
seen["seccomp mode"] = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())["Seccomp"].strip()
thread = threading.Thread(target=lambda: seen.update(thread="ran"))
thread.start()
thread.join()
torch.set_num_threads(2)
seen["torch"] = float((torch.ones(256, 256, dtype=torch.float64) @ torch.ones(256, 256, dtype=torch.float64)).sum())
seen["child"] = subprocess.run([sys.executable, "-S", "-c", "print(7)"], capture_output=True, text=True).stdout
if os.uname().machine == "x86_64":
    seen["i386 entry"] = i386_entry()
print("CALLS " + json.dumps(seen), flush=True)
"""


def _i386_entry_works() -> bool:
    """Whether this kernel runs i386 calls from 64-bit code at all (CONFIG_IA32_EMULATION): the test's own child."""
    if os.uname().machine != "x86_64":
        return False
    pid = os.fork()
    if pid == 0:
        import mmap

        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3]))
        ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
        os._exit(0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


@pytest.mark.e2e
@ROOT_ONLY
@pytest.mark.parametrize(
    "level,forked",
    [
        ("namespaces+uid", False),
        ("namespaces+uid", True),
        ("user-namespace", False),
        ("user-namespace", True),
        ("limits-only", False),
        ("limits-only", True),
    ],
)
def test_the_filter_refuses_every_listed_call(level: Level, forked: bool, tmp_path: Path) -> None:
    machine = os.uname().machine
    if machine not in seccomp.TABLES:
        pytest.skip(f"no system call table for {machine}")
    numbers = seccomp.numbers(machine)
    expected = [*REFUSED, *(X86_64_REFUSED if machine == "x86_64" else [])]
    calls = [(label, numbers[name], args) for label, name, args, _ in expected]
    if machine == "x86_64":
        calls.append(("x32 getpid", seccomp.X32_SYSCALL_BIT | numbers["getpid"], []))
    submission = tmp_path / "probe.py"
    submission.write_text(f"CALLS = {json.dumps(calls)!r}\n" + FILTER_PROBE)
    zygote = Zygote() if forked else None
    slot = Slot()
    box = Box(read_submission(submission), None, Limits(), level, slot)
    worker = WorkerProcess(box, ["masked_is_weights"], zygote)
    try:
        hello = accept_frame(worker.receive(120))
    finally:
        worker.close()
        box.cleanup()
        slot.release()
        if zygote is not None:
            zygote.close()
    out = worker.stdout.text()
    assert hello.get("op") == "ready", (hello, out, worker.stderr.text())
    seen = json.loads(next(line for line in out.splitlines() if line.startswith("CALLS ")).removeprefix("CALLS "))
    assert {label: seen[label] for label, *_ in expected} == {label: want for label, _, _, want in expected}
    assert seen["seccomp mode"] == "2" and seen["thread"] == "ran" and seen["torch"] == 256.0**3
    assert seen["child"] == "7\n"
    if machine == "x86_64":
        assert seen["x32 getpid"] == "ENOSYS"
        if _i386_entry_works():
            assert seen["i386 entry"] == signal.SIGSYS.name


@pytest.mark.e2e
def test_a_worker_whose_filter_cannot_be_installed_never_starts(tmp_path: Path) -> None:
    machine = os.uname().machine
    if machine not in seccomp.TABLES:
        pytest.skip(f"no system call table for {machine}")
    # a filter of the sandbox's parent that refuses seccomp() itself: the worker's own cannot be added
    refuse = seccomp.assemble(
        machine, {seccomp.numbers(machine)["seccomp"]: EPERM}, seccomp.RET_ALLOW, seccomp.RET_ALLOW
    )

    def refuse_filters() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, which an unprivileged filter needs
        seccomp.install(libc, refuse)

    config = {
        "argv": [sys.executable, "-S", "-c", "print('the worker ran')"],
        "worker": {},
        "env": {"PATH": "/usr/bin:/bin"},
        "rlimits": {},
        "uid": os.getuid(),
        "gid": os.getgid(),
        "drop_uid": False,
        "die_with_parent": False,
        "cwd": str(tmp_path),
        "tmp_mb": 64,
        "cgroups": [],
    }
    result = subprocess.run(
        [sys.executable, "-I", "-S", str(INIT_SCRIPT)],
        input=json.dumps(config).encode(),
        capture_output=True,
        preexec_fn=refuse_filters,
        timeout=60,
    )
    assert result.returncode == 97, result.stderr
    assert b"the worker ran" not in result.stdout
    assert b"could not install the system call filter: seccomp: Operation not permitted" in result.stderr


def test_a_kernel_without_seccomp_is_named_in_the_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(seccomp, "kernel_has_seccomp", lambda libc: False)
    submission = tmp_path / "s.py"
    submission.write_text("")
    sandbox._syscall_filter.cache_clear()
    slot = Slot()
    box = Box(read_submission(submission), None, Limits(), "limits-only", slot)
    try:
        isolation = box.isolation()
    finally:
        box.cleanup()
        slot.release()
        sandbox._syscall_filter.cache_clear()
    assert isolation.syscall_filter == "none: this kernel has no seccomp"
    assert any(note.startswith("no system call filter") for note in isolation.notes)


@pytest.mark.e2e
@ROOT_ONLY
@pytest.mark.parametrize("level", LEVELS)
def test_a_correct_file_earns_full_marks_under_the_filter(
    level: Level, cli_env: dict[str, str], tmp_path: Path
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "grade",
            str(HOSTILE / "honest_correct.py"),
            "--problem",
            PROBLEM,
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        env={**cli_env, "PAPERLEET_ISOLATION": level},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["isolation"]["level"] == level
    assert report["isolation"]["syscall_filter"].startswith("seccomp allow-list")
    assert report["score"] == 100, report["stderr"][-2000:]
