"""The sandbox from the inside and the judge's side of the channel: what a worker sees at each level, what it
leaves behind, the masks over secrets, and the frames, pipes and floods the judge must survive."""

from __future__ import annotations

import io
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import PROBLEM, ROOT

from grader import cgroups, sandbox
from grader.paths import PROJECT_ROOT
from grader.sandbox import GRADER_PACKAGE, Box, Level, Slot, masks, secrets
from grader.session import CappedStream, Worker, WorkerTimeout, _check_archive, _check_tensors
from grader.spec import Limits
from grader.worker import protocol
from grader.worker.framing import ProtocolError

HOSTILE = Path(__file__).resolve().parent / "hostile"
LEVELS: list[Level] = ["namespaces+uid", "user-namespace", "limits-only"]
MARKER = "paperleet-sandbox-probe"
PLANTED = "/opt/planted-site"  # where the box shows the planted site folder
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to grant namespaces and slot uids")

# Imported by the worker: reports what it can see and do, then leaves a double-forked daemon behind.
PROBE = r'''
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
'''


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
    submission.write_text(f"SECRET = '{PLANTED}/grader/secret.txt'\nVISIBLE = '{PLANTED}/visible.txt'\n"
                          f"MARKER = {MARKER!r}\n" + PROBE)
    slot = Slot()
    box = PlantedBox(submission, None, Limits(), level, slot)
    worker = Worker(box, ["masked_is_weights"])
    try:
        hello = worker.receive(60)
    finally:
        worker.close()
        slot.release()
        box.cleanup()
    out = worker.stdout.text()
    assert hello.get("op") == "ready", (hello, out, worker.stderr.text())
    line = next(line for line in out.splitlines() if line.startswith("FACTS "))
    return dict(json.loads(line.removeprefix("FACTS ")))


@ROOT_ONLY
@pytest.mark.parametrize("level", LEVELS)
def test_close_leaves_no_process_behind(level: Level, planted: Path, tmp_path: Path) -> None:
    inside(level, planted, tmp_path)
    assert _marked_processes() == []  # the daemon died with its grading, even without a PID namespace


@ROOT_ONLY
def test_namespaces_and_uid_box(planted: Path, tmp_path: Path) -> None:
    facts = inside("namespaces+uid", planted, tmp_path)
    assert sandbox.SLOT_UID_BASE <= facts["uid"] < sandbox.SLOT_UID_BASE + sandbox.MAX_SLOTS
    assert 1 not in facts["pids"] and facts["pids"] == [facts["pid"]]  # its init is hidden, the host invisible
    assert set(facts["etc"]) <= {*sandbox.ETC_ENTRIES, "passwd", "group", "hostname", "hosts"}
    python_tops = {Path(os.path.realpath(p)).parts[1] for p in (sys.base_prefix, sys.prefix)}
    assert set(facts["root"]) <= {"usr", "lib", "lib64", "lib32", "bin", "sbin", "etc", "opt", "runtime", "scratch",
                                  "tmp", "dev", "proc", *python_tops}
    assert facts["hostname"] == "paperleet"
    assert facts["cap_eff"] == "0000000000000000" and facts["no_new_privs"] == "1"
    assert not facts["loopback"] and not facts["shadow"] and not facts["runtime_writable"]
    assert facts["planted_visible"] and not facts["planted_secret"]


@ROOT_ONLY
def test_user_namespace_box(planted: Path, tmp_path: Path) -> None:
    facts = inside("user-namespace", planted, tmp_path)
    assert facts["uid"] == 0  # a root without capabilities, inside its own namespace
    assert facts["cap_eff"] == "0000000000000000" and facts["no_new_privs"] == "1"
    assert set(facts["etc"]) <= {*sandbox.ETC_ENTRIES, "passwd", "group", "hostname", "hosts"}
    assert not facts["loopback"] and not facts["shadow"] and not facts["runtime_writable"]
    assert facts["planted_visible"] and not facts["planted_secret"]


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


@ROOT_ONLY
@pytest.mark.parametrize("level", ["namespaces+uid", "limits-only"])
def test_a_judge_that_dies_takes_its_workers_along(level: Level, tmp_path: Path) -> None:
    marker = f"paperleet-sandbox-linger-{level}"
    submission = tmp_path / "linger.py"
    submission.write_text(f"MARKER = {marker!r}\n" + LINGER)
    judge = subprocess.Popen([sys.executable, "-m", "grader", "grade", str(submission), "--problem", PROBLEM,
                              "--out", str(tmp_path / "out"), "--import-timeout", "100"], cwd=ROOT,
                             env={**os.environ, "PAPERLEET_ISOLATION": level}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
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
        script += [f"mkdir -p {stage}/{index}", f"mount --bind {need} {stage}/{index}",
                   f"mountpoint -q {closed} && [ -e {closed}/.paperleet-open ] || "
                   f"{{ mount -t tmpfs -o mode=0755,size=1m tmpfs {closed} && touch {closed}/.paperleet-open; }}",
                   f"mkdir -p {need}", f"mount --bind {stage}/{index} {need}"]
    assignments = [f"{k}={v}" for k, v in env.items()]
    script.append(shlex.join(["exec", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "-i",
                              *assignments, *command]))
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
    env = {"HOME": str(home), "MPLCONFIGDIR": str(home / "mpl"), "PAPERLEET_CACHE": str(home / "cache"),
           "PAPERLEET_ARTIFACTS": str(home / "artifacts"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    python = [sys.executable, "-m", "grader"]
    stage = home / "stage"
    probe = subprocess.run(_as_nobody([sys.executable, "-c", "from grader.sandbox import best_level; "
                                       "print(best_level())"], env, stage), cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"cannot run Python as an ordinary user here: {probe.stderr[-300:]}")
    command = [*python, "grade-all", "--problem", PROBLEM, "--submissions", str(folder), "--out", str(out),
               "--jobs", "2", "--budget", "60"]
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


def test_an_ordinary_user_grades_confined(as_nobody: dict[str, Any]) -> None:
    reports, level = as_nobody["reports"], as_nobody["level"]
    assert as_nobody["result"].returncode == 0, as_nobody["result"].stderr[-2000:]
    assert {r["isolation"]["level"] for r in reports.values()} == {level}
    assert {r["isolation"]["uid"] for r in reports.values()} == {65534}
    assert reports["honest_correct"]["score"] == 100
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
    assert masks(binds, [project]) == [f"/usr/share/project/{n}" for n in ("grader", "pyproject.toml", "reference",
                                                                          "submissions")]


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
    box = Box(submission, None, Limits(), level, slot)
    try:
        isolation = box.isolation()
    finally:
        slot.release()
        box.cleanup()
    assert isolation.level == level
    assert isolation.namespaces == ([] if level == "limits-only" else ["pid", "mount", "net", "ipc", "uts"])
    assert set(isolation.limits) >= {"RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE"}
    if level != "namespaces+uid" or box.cgroup is None:
        assert isolation.notes  # anything short of the full box is spelled out


# ----------------------------------------------------------------------------- the channel


def _frame(message: dict[str, Any]) -> bytes:
    return protocol.encode(message)[8:]


def _bomb(inflated: int) -> bytes:
    plain = zipfile.ZipFile(io.BytesIO(_frame({"x": torch.zeros(1, dtype=torch.uint8)})))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info in plain.infolist():
            if info.filename.endswith("/data/0"):
                record = zipfile.ZipInfo(info.filename)
                record.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(record, "w", force_zip64=True) as handle:
                    for _ in range(inflated >> 20):
                        handle.write(bytes(1 << 20))
            else:
                archive.writestr(info.filename, plain.read(info.filename))
    return out.getvalue()


def test_a_compressed_frame_is_refused_before_it_is_inflated() -> None:
    payload = _bomb(256 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ProtocolError, match="records holding"):
        _check_archive(payload)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB: nothing was inflated


def test_what_torch_save_writes_passes() -> None:
    message = {"op": "observed", "output": {"kind": "tensor", "value": torch.randn(64, 64)}}
    payload = _frame(message)
    _check_archive(payload)
    assert torch.equal(_check_tensors(protocol.decode(payload))["output"]["value"], message["output"]["value"])


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
@pytest.mark.parametrize("make", [
    lambda: torch.zeros(3, 3).to_sparse(),
    lambda: torch.zeros(3, device="meta"),
    lambda: torch.quantize_per_tensor(torch.zeros(3), 0.1, 0, torch.quint8),
], ids=["sparse", "meta", "quantized"])
def test_only_dense_tensors_cross_to_the_judge(make: Any) -> None:
    with pytest.raises(ProtocolError, match="only dense tensors"):
        _check_tensors({"op": "observed", "output": {"kind": "tensor", "value": make()}})


def test_an_endless_frame_is_refused() -> None:
    with pytest.raises(ProtocolError, match="values in one frame"):
        _check_tensors({"items": list(range(1 << 17))})


class _Exited:
    """Stands in for a worker process that has already ended."""

    def wait(self, timeout: float | None = None) -> int:
        return 0


@pytest.fixture
def silent_worker() -> Iterator[Worker]:
    """A worker handle whose other end never reads a request nor writes an answer."""
    worker = Worker.__new__(Worker)
    request_read, worker._request_write = os.pipe()
    worker._response_read, response_write = os.pipe()
    os.set_blocking(worker._request_write, False)
    worker.process = _Exited()  # type: ignore[assignment]
    worker.max_frame = 1 << 20
    yield worker
    for fd in (request_read, worker._request_write, worker._response_read, response_write):
        os.close(fd)


def test_a_worker_that_stops_reading_cannot_block_the_judge(silent_worker: Worker) -> None:
    started = time.monotonic()
    with pytest.raises(WorkerTimeout):
        silent_worker.send({"kwargs": {"x": torch.zeros(1 << 20)}}, timeout=0.5)  # 4 MiB: more than a pipe holds
    assert time.monotonic() - started < 2


def test_a_worker_that_never_answers_times_out(silent_worker: Worker) -> None:
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
