"""Every file of tests/hostile/ graded once through the CLI: none may crash the grader, outlive its grading, reach
what it must not, forge its report or raise its score above what an honest equivalent earns."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, ROOT, checks_of

from grader.report import load_report
from grader.sandbox import BOX_TMPFS_MB, MAX_SLOTS, SLOT_UID_BASE
from grader.verdicts import ExitCode, Verdict

pytestmark = pytest.mark.slow

HOSTILE = Path(__file__).resolve().parent / "hostile"
FILES = sorted(p.stem for p in HOSTILE.glob("*.py"))
BUDGET_S, IMPORT_TIMEOUT_S, MEMORY_MB = 30, 15, 2048
LIMITS = ["--call-timeout", "2", "--import-timeout", str(IMPORT_TIMEOUT_S), "--budget", str(BUDGET_S),
          "--memory-mb", str(MEMORY_MB)]
AFTER_BUDGET_S = 10  # killing the last worker and writing the report, after the budget has run out
MARKER = "paperleet-hostile"  # in the command line, name or file name of whatever a hostile file leaves behind
FORGED = "FORGED-BY-HOSTILE"
LISTENER_PORT = 47613  # tests/hostile/network_connect.py knocks here
ABSTRACT_SOCKET = "\0paperleet-hostile-listener"


@dataclass(frozen=True)
class Expected:
    """A hostile file's header: the statuses it may end in, and the score it must earn (a number, an honest
    twin's file stem, or `signatures_only`)."""

    statuses: frozenset[str]
    score: str | None


def expected(stem: str) -> Expected:
    text = (HOSTILE / f"{stem}.py").read_text()
    fields = dict(re.findall(r"^# (expect_status|expect_score): *(.+)$", text, re.M))
    statuses = frozenset(s.strip() for s in fields["expect_status"].split(","))
    return Expected(statuses, fields.get("expect_score"))


@dataclass
class Hostile:
    """The batch: the CLI's outcome, every report, and what was found on the machine right after."""

    returncode: int
    stderr: str
    out: Path
    reports: dict[str, dict[str, Any]]
    strays: list[str]
    strays_later: list[str]
    markers: list[Path]
    knocks: list[str]


class Listeners:
    """The host's loopback TCP and UDP port and an abstract unix socket, recording whoever reaches them."""

    def __init__(self) -> None:
        self.knocks: list[str] = []
        self.sockets: list[socket.socket] = []
        for family, kind, address in [(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", LISTENER_PORT)),
                                      (socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", LISTENER_PORT)),
                                      (socket.AF_UNIX, socket.SOCK_STREAM, ABSTRACT_SOCKET)]:
            sock = socket.socket(family, kind)
            try:
                sock.bind(address)
            except OSError:
                sock.close()  # taken: the hostile file's own report still says whether it connected
                continue
            if kind == socket.SOCK_STREAM:
                sock.listen()
            sock.settimeout(0.2)
            self.sockets.append(sock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            for sock in self.sockets:
                try:
                    if sock.type == socket.SOCK_STREAM:
                        peer, address = sock.accept()
                        peer.close()
                    else:
                        _, address = sock.recvfrom(256)
                    self.knocks.append(f"{sock.getsockname()!r} from {address!r}")
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self.sockets:
            sock.close()


@contextmanager
def listening() -> Iterator[Listeners]:
    listeners = Listeners()
    try:
        yield listeners
    finally:
        listeners.close()


def _proc(pid: str, name: str) -> str:
    try:
        return Path("/proc", pid, name).read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _status(pid: str) -> dict[str, str]:
    return {k: v.strip() for k, v in (line.split(":", 1) for line in _proc(pid, "status").splitlines() if ":" in line)}


def _worker_uid(fields: dict[str, str]) -> bool:
    return SLOT_UID_BASE <= int(fields["Uid"].split()[0]) < SLOT_UID_BASE + MAX_SLOTS


def _owned_by_a_live_grader(pid: str) -> bool:
    """Whether a worker-uid process still hangs below a live `unshare` or judge (someone else's grading, going
    on): a leftover of a finished grading has lost them, and hangs below init or some unrelated subreaper."""
    while (fields := _status(pid)) and _worker_uid(fields):
        pid = fields.get("PPid", "0")
    command = _proc(pid, "cmdline")
    return pid not in ("0", "1") and any(word in command for word in ("unshare", "python", "pytest"))


def stray_processes() -> list[str]:
    """Live processes of a worker slot's uid that no running grading owns, and any carrying a hostile marker,
    seen twice half a second apart (a leftover stays; someone else's worker caught while ending does not)."""
    first = _strays()
    time.sleep(0.5)
    return sorted(set(first) & set(_strays()))


def _strays() -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fields = _status(pid)
        if not fields or fields.get("State", "").startswith("Z"):
            continue
        command, name = _proc(pid, "cmdline"), _proc(pid, "comm")
        marked = MARKER in command or name.startswith("paperleet-host")
        if marked or (_worker_uid(fields) and not _owned_by_a_live_grader(pid)):
            found.append(f"pid {pid} uid {fields['Uid'].split()[0]} {name.strip()}: {command[:120]}")
    return found


def marker_files(*folders: Path) -> list[Path]:
    """Files a hostile file dropped outside its box: in /tmp, /dev/shm, the project and the output folder."""
    found = [p for folder in (Path("/tmp"), Path("/dev/shm"), ROOT, HOSTILE) for p in folder.glob(f"{MARKER}*")]
    for folder in folders:
        found += folder.rglob(f"{MARKER}*")
    return found


@pytest.fixture(scope="module")
def hostile(run_cli, tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    for stale in marker_files():
        stale.unlink()  # left by an earlier, failed run; this run must leave none of its own
    base = tmp_path_factory.mktemp("hostile")
    out = base / "out"
    with listening() as listeners:
        result = run_cli("grade-all", "--problem", PROBLEM, "--submissions", HOSTILE, "--out", out, "--jobs", "2",
                         *LIMITS, timeout=1200)
        strays = stray_processes()
        time.sleep(4)  # a daemon that survived would have woken up (3 s) and written by now
        strays_later = stray_processes()
    reports = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/report.json")}
    return Hostile(result.returncode, result.stderr, out, reports, strays, strays_later, marker_files(base),
                   list(listeners.knocks))


def score_of(hostile: Hostile, stem: str) -> float:
    return float(hostile.reports[stem]["score"])


def stdout_of(hostile: Hostile, stem: str) -> str:
    return str(hostile.reports[stem]["stdout"])


def test_the_batch_ends_ok_with_a_report_per_file(hostile: Hostile) -> None:
    assert hostile.returncode == ExitCode.OK, hostile.stderr[-3000:]
    assert sorted(hostile.reports) == FILES


@pytest.mark.parametrize("stem", FILES)
def test_no_hostile_file_causes_a_judge_error(hostile: Hostile, stem: str) -> None:
    report = hostile.reports[stem]
    assert report["status"] != "judge_error"
    assert Verdict.JUDGE_ERROR not in {c["verdict"] for c in checks_of(report).values()}


@pytest.mark.parametrize("stem", FILES)
def test_status_is_the_expected_one(hostile: Hostile, stem: str) -> None:
    assert hostile.reports[stem]["status"] in expected(stem).statuses, hostile.reports[stem]["message"]


@pytest.mark.parametrize("stem", [s for s in FILES if expected(s).score is not None])
def test_score_is_what_an_honest_equivalent_earns(hostile: Hostile, stem: str) -> None:
    want = expected(stem).score
    report = hostile.reports[stem]
    if want == "signatures_only":
        checks = checks_of(report)
        assert report["score"] == checks["signatures"]["max_score"]
        assert all(c["score"] == 0 for c in checks.values() if c["id"] != "signatures")
    elif want in hostile.reports:
        assert report["score"] == score_of(hostile, want), f"{stem} must score exactly what {want} scores"
    else:
        assert report["score"] == float(want)


@pytest.mark.parametrize("stem", FILES)
def test_grading_ends_within_its_budget(hostile: Hostile, stem: str) -> None:
    report = hostile.reports[stem]
    limit = IMPORT_TIMEOUT_S if report["status"] == "import_timeout" else BUDGET_S
    assert report["duration_s"] <= limit + AFTER_BUDGET_S


def test_no_process_outlives_its_grading(hostile: Hostile) -> None:
    assert hostile.strays == []
    assert hostile.strays_later == []


def test_no_marker_file_lands_outside_the_box(hostile: Hostile) -> None:
    assert hostile.markers == []


def test_no_forged_report_survives(hostile: Hostile) -> None:
    for path in hostile.out.rglob("*.json"):
        assert FORGED not in path.read_text(), path
    for stem in FILES:
        load_report(hostile.out / stem / "report.json")  # the judge's own, complete report
    assert score_of(hostile, "forge_report_daemon") == score_of(hostile, "honest_zeros")


@pytest.mark.parametrize("stem", [s for s in FILES if s.startswith(("read_", "network_"))])
def test_nothing_secret_reaches_a_learner(hostile: Hostile, stem: str) -> None:
    assert "LEAKED" not in stdout_of(hostile, stem)
    assert score_of(hostile, stem) == score_of(hostile, "honest_correct")


def test_no_connection_reaches_the_host(hostile: Hostile) -> None:
    assert hostile.knocks == []


def test_one_process_cannot_take_more_memory_than_its_limit(hostile: Hostile) -> None:
    touched = re.search(r"touched (\d+) MiB in one process", stdout_of(hostile, "memory_one_process"))
    assert touched is not None and int(touched.group(1)) <= MEMORY_MB


def test_processes_together_stay_within_the_control_group(hostile: Hostile) -> None:
    report = hostile.reports["memory_many_processes"]
    held = re.search(r"held (\d+) MiB at once across (\d+) processes", report["stdout"])
    assert held is not None, report["stdout"]
    cgroup = report["isolation"]["limits"].get("CGROUP_MEMORY_BYTES")
    if cgroup is None:
        pytest.skip("no control group on this machine: the memory of a worker's processes together is unbounded")
    assert int(held.group(1)) << 20 <= cgroup


def test_disk_writes_stay_in_the_box(hostile: Hostile) -> None:
    writes = re.findall(r"wrote (\d+) MiB to (\S+)", stdout_of(hostile, "disk_fill"))
    assert {place for _, place in writes} == {"/scratch", "/tmp", "/dev/shm"}
    assert all(int(mib) <= BOX_TMPFS_MB for mib, _ in writes)


def test_an_output_flood_is_capped(hostile: Hostile) -> None:
    report = hostile.reports["flood_output"]
    for stream in ("stdout", "stderr"):
        kept, _, note = report[stream].partition("\n[... ")
        assert len(kept.encode()) <= 64 << 10
        assert re.match(r"\d+ more bytes dropped\]", note), note[:80]


def test_the_process_count_is_capped(hostile: Hostile) -> None:
    started = re.search(r"started (\d+) children", stdout_of(hostile, "outlive_many_children"))
    assert started is not None and int(started.group(1)) < 64


def test_the_isolation_in_force_is_recorded(hostile: Hostile) -> None:
    isolation = hostile.reports["honest_zeros"]["isolation"]
    if os.geteuid() == 0:
        assert isolation["level"] == "namespaces+uid"
        assert SLOT_UID_BASE <= isolation["uid"] < SLOT_UID_BASE + MAX_SLOTS
    assert isolation["limits"]["RLIMIT_AS"] == MEMORY_MB << 20
