"""Every file of tests/hostile/ graded once through the CLI: none may crash the grader, outlive its grading, reach
what it must not, forge its report or raise its score above what an honest equivalent earns."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import socket
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import torch
from conftest import PROBLEM, ROOT, checks_of, series_fingerprints

from grader import commands, engine
from grader.confine.sandbox import BOX_TMPFS_MB, MAX_SLOTS, SLOT_UID_BASE
from grader.judge.grading import Graded
from grader.model.problem import Problem
from grader.model.report import Report, load_report
from grader.model.spec import Tolerance
from grader.model.verdicts import ExitCode, Status, Verdict
from grader.outputs import drawing, pages
from grader.outputs.containment import LEARNER_SENTENCE, judge_error_report
from grader.outputs.exports import gradescope_results, junit_xml
from grader.outputs.learner_view import LEARNER_SECONDS, learner_view
from grader.outputs.pages.previews import PreviewSource
from grader.outputs.plots import PLOT_TIMEOUT_S, PlotJob, figure_specs, preview_file, series_tolerances
from grader.text import MESSAGE_CHARS, clean_line, csv_cell, submission_folder

pytestmark = pytest.mark.slow

HOSTILE = Path(__file__).resolve().parent / "hostile"
FILES = sorted(p.stem for p in HOSTILE.glob("*.py"))
# File names no repository should hold (or can: undecodable bytes), each given to a copy of honest_correct.py in
# the batch's folder: each must be graded like it, into a folder of its own, and reach every output escaped.
ODD_NAMES = [
    "summary.csv.py",
    "index.html.py",
    "shards.py",
    "previews.py",
    "...py",
    "..py",
    "[red]x[blink].py",
    "\x1b[31mred\x1b[0m\u202eyp.py",
    "\x9b2J c1.py",
    '=HYPERLINK("http:x").py',
    "+1.py",
    "-1.py",
    "@SUM(A1).py",
    "\tTAB.py",
    os.fsdecode(b"lone \xed\xa0\x80 \xff\xfe bytes.py"),
]
FORMULA_NAMES = [name for name in ODD_NAMES if name.startswith(("=", "+", "-", "@", "\t"))]
# Entries that are no regular file, beside the copies: each must be refused with 0 points, none may hold the batch
NOT_FILES = {"link_to_reference": ROOT / "reference" / PROBLEM / "reference.py", "fifo_never_written": None}
FOLDERS = {**{stem: stem for stem in FILES}, **{name: submission_folder(name) for name in ODD_NAMES}}
FOLDERS.update({stem: stem for stem in NOT_FILES})
BUDGET_S, IMPORT_TIMEOUT_S, MEMORY_MB = 30, 15, 2048
LIMITS = [
    "--call-timeout",
    "2",
    "--import-timeout",
    str(IMPORT_TIMEOUT_S),
    "--budget",
    str(BUDGET_S),
    "--memory-mb",
    str(MEMORY_MB),
]
# the fields of a test in Gradescope's results.json that carry no time
GRADESCOPE_TEST_KEYS = {"name", "number", "score", "max_score", "status", "output", "tags", "visibility"}
AFTER_BUDGET_S = 10  # killing the last worker and writing the report, after the budget has run out
MARKER = "paperleet-hostile"  # in the command line, name or file name of whatever a hostile file leaves behind
FORGED = "FORGED-BY-HOSTILE"
LISTENER_PORT = 47613  # tests/hostile/network_connect.py knocks here
ABSTRACT_SOCKET = "\0paperleet-hostile-listener"


@dataclass(frozen=True)
class Expected:
    """A hostile file's header: the statuses it may end in, and the score it must earn (a number, an honest
    twin's file stem, or `signatures_only`: the contract's signatures, and no visible call that returns a value,
    which earns nothing)."""

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
    stdout: str
    stderr: str
    base: Path
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
        endpoints: list[tuple[socket.AddressFamily, socket.SocketKind, tuple[str, int] | str]] = [
            (socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", LISTENER_PORT)),
            (socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", LISTENER_PORT)),
            (socket.AF_UNIX, socket.SOCK_STREAM, ABSTRACT_SOCKET),
        ]
        for family, kind, address in endpoints:
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
    out, submissions = base / "out", base / "submissions"
    submissions.mkdir()
    for path in HOSTILE.glob("*.py"):
        shutil.copyfile(path, submissions / path.name)
    for name in ODD_NAMES:
        shutil.copyfile(HOSTILE / "honest_correct.py", os.path.join(os.fsencode(submissions), os.fsencode(name)))
    for stem, target in NOT_FILES.items():
        if target is None:
            os.mkfifo(submissions / f"{stem}.py")  # never written: a grader that waits for a writer never ends
        else:
            (submissions / f"{stem}.py").symlink_to(target)
    with listening() as listeners:
        result = run_cli(
            "grade-all",
            "--problem",
            PROBLEM,
            "--submissions",
            submissions,
            "--out",
            out,
            "--jobs",
            "2",
            *LIMITS,
            timeout=1200,
        )
        strays = stray_processes()
        time.sleep(4)  # a daemon that survived would have woken up (3 s) and written by now
        strays_later = stray_processes()
    reports = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/report.json")}
    return Hostile(
        result.returncode,
        result.stdout,
        result.stderr,
        base,
        out,
        reports,
        strays,
        strays_later,
        marker_files(base),
        list(listeners.knocks),
    )


def score_of(hostile: Hostile, stem: str) -> float:
    return float(hostile.reports[stem]["score"])


def stdout_of(hostile: Hostile, stem: str) -> str:
    return str(hostile.reports[stem]["stdout"])


def test_the_batch_ends_ok_with_a_report_per_file(hostile: Hostile) -> None:
    assert hostile.returncode == ExitCode.OK, hostile.stderr[-3000:]
    assert sorted(hostile.reports) == sorted(FOLDERS.values())


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
    assert want is not None  # the parametrization keeps only files that declare a score
    report = hostile.reports[stem]
    if want == "signatures_only":
        # the contract's signatures and no call that returns a value: the signature check earns nothing either
        checks = checks_of(report)
        assert report["score"] == 0 and all(c["score"] == 0 for c in checks.values())
        assert "has the contract's signature" in checks["signatures"]["message"]
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


def test_no_learner_output_times_a_check_with_hidden_cases(hostile: Hostile) -> None:
    """leak_durations sleeps on hidden cases for times that spell their inputs; only instructors see those times."""
    report = load_report(hostile.out / "leak_durations" / "report.json")
    hidden = {c.id: c for c in report.checks() if not c.duration_public}
    assert {"oracle_weights", "oracle_loss", "oracle_grad"} <= set(hidden)
    view = learner_view(report)
    assert all(c["duration_s"] is None for t in view["tiers"] for c in t["checks"] if c["id"] in hidden)
    assert view["duration_s"] % LEARNER_SECONDS == 0
    results = gradescope_results(report)
    assert results["execution_time"] % LEARNER_SECONDS == 0
    assert all(set(test) <= GRADESCOPE_TEST_KEYS for test in results["tests"])
    junit = ET.fromstring(junit_xml(report))
    for suite in junit.iter("testsuite"):
        if {case.get("name") for case in suite.iter("testcase")} & set(hidden):
            assert "time" not in suite.attrib
    assert all("time" not in case.attrib for case in junit.iter("testcase") if case.get("name") in hidden)
    page = (hostile.out / "leak_durations" / "report.html").read_text(encoding="utf-8")
    for check in hidden.values():  # the page (the instructor's) shows the total, never a check's time
        text = str(check.duration_s)
        assert check.duration_s == 0 or not re.search(rf"(?<![\d.]){re.escape(text)}(?![\d.])", page), check.id


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


# ---------------------------------------------------------------------------------------------- per-file containment


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def _submission_name(key: str) -> str:
    return f"{key}.py" if key in FILES or key in NOT_FILES else key


def test_a_class_holding_every_hostile_file_gets_its_outputs(hostile: Hostile) -> None:
    rows = _rows(hostile.out / "summary.csv")
    assert sorted(row["submission"] for row in rows) == sorted(csv_cell(_submission_name(k)) for k in FOLDERS)
    page = (hostile.out / "index.html").read_text(encoding="utf-8")
    links = {unquote(link) for link in re.findall(r'href="([^"#]+/report\.html)', page)}
    assert links == {f"{folder}/report.html" for folder in FOLDERS.values()}
    for folder in FOLDERS.values():
        assert (hostile.out / folder / "report.json").is_file() and (hostile.out / folder / "report.html").is_file()
    # nothing lands beside --out or on a class output: `...py` and `..py` write into folders of their own
    assert sorted(p.name for p in hostile.base.iterdir()) == ["out", "submissions"]
    assert {p.name for p in hostile.out.iterdir()} == {"summary.csv", "index.html", *FOLDERS.values()}


@pytest.mark.parametrize("name", ODD_NAMES, ids=ascii)
def test_an_odd_file_name_is_graded_like_any_other(hostile: Hostile, name: str) -> None:
    report = hostile.reports[submission_folder(name)]
    assert report["submission"] == clean_line(name)
    assert report["status"] == "graded" and report["score"] == score_of(hostile, "honest_correct")


def test_file_names_that_spreadsheets_evaluate_are_inert_in_the_summary(hostile: Hostile) -> None:
    cells = {row["submission"] for row in _rows(hostile.out / "summary.csv")}
    assert all(not cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in cells)
    assert {csv_cell(name) for name in FORMULA_NAMES} <= cells


RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def test_no_learner_text_reaches_an_output_raw(hostile: Hostile) -> None:
    for path in [*hostile.out.rglob("*.json"), *hostile.out.rglob("*.html"), hostile.out / "summary.csv"]:
        text = path.read_text(encoding="utf-8")  # strict: a surrogate could not have been written
        assert not RAW.search(text), (path, RAW.search(text))
    assert not RAW.search(hostile.stdout) and "\x1b" not in hostile.stderr
    assert "[red]x[blink].py" in hostile.stdout  # rich markup shown as text, not applied
    report = hostile.reports["text_hostile_messages"]
    messages = " ".join(c["message"] for c in checks_of(report).values())
    assert "\\x1b[2J" in messages and "\\u202e" in messages and "\N{REPLACEMENT CHARACTER}" in messages
    assert "\\x1b[31m" in report["stdout"] and "\\x1b]8;;" in report["stderr"]


@pytest.mark.parametrize("stem", ["text_huge_import_error", "text_huge_exception_type"])
def test_megabytes_of_learner_text_leave_the_report_small(hostile: Hostile, stem: str) -> None:
    assert (hostile.out / stem / "report.json").stat().st_size < 512 << 10
    assert all(len(c["message"]) <= MESSAGE_CHARS for c in checks_of(hostile.reports[stem]).values())


def test_a_huge_import_error_is_cut_with_a_count(hostile: Hostile) -> None:
    assert re.search(r"more characters\)$", hostile.reports["text_huge_import_error"]["message"])


@pytest.mark.parametrize(
    ("stem", "words"),
    [
        ("return_exotic_dtypes", ["could not be accepted", "float8_e4m3fn"]),
        ("text_huge_exception_type", ["could not be accepted", "characters of text"]),
    ],
)
def test_forged_or_exotic_answers_are_the_learners_malformed_answer(
    hostile: Hostile, stem: str, words: list[str]
) -> None:
    messages = " ".join(c["message"] for c in checks_of(hostile.reports[stem]).values())
    assert all(word in messages for word in words), messages[:2000]


def test_a_frame_too_deep_to_read_is_the_workers_crash(hostile: Hostile) -> None:
    checks = checks_of(hostile.reports["forge_frame_nested"])
    crashed = [c for c in checks.values() if c["verdict"] == "crashed"]
    assert crashed and all("unreadable" in c["message"] for c in crashed)


def test_a_loss_of_dtype_bits8_is_malformed(hostile: Hostile) -> None:
    checks = checks_of(hostile.reports["return_exotic_dtypes"])
    assert any("torch.bits8" in c["message"] for c in checks.values())


@pytest.mark.parametrize("stem", ["text_huge_import_error", "text_hostile_messages"])
def test_the_terminal_gets_bounded_escaped_text(run_cli, tmp_path: Path, stem: str) -> None:
    result = run_cli("grade", HOSTILE / f"{stem}.py", "--problem", PROBLEM, "--out", tmp_path / "out", *LIMITS)
    assert result.returncode in (ExitCode.OK, ExitCode.IMPORT_FAILED), result.stderr[-2000:]
    assert len(result.stdout) + len(result.stderr) < 64 << 10
    assert not RAW.search(result.stdout) and "\x1b" not in result.stderr


# ---------------------------------------------------------------------------------------------- containment in-process


class _NoZygote:
    def close(self) -> None:
        pass


class _FakeExpectations:
    """Expectations with nothing to compute: these tests grade nothing for real."""

    def __init__(self, problem: Problem, seed: int, **options: object) -> None:
        self.seed = seed

    def warm(self) -> None:
        pass

    def series(self) -> dict[str, Any]:
        return {}

    def persist(self) -> None:
        pass


def _passing(problem: Problem, file: Path, seed: int) -> Report:
    report = judge_error_report(problem, file, seed, RuntimeError("unused"), "")
    for check in report.checks():
        check.verdict, check.score, check.message, check.learner_message = Verdict.PASS, check.max_score, "ok", "ok"
    return report.model_copy(update={"status": Status.GRADED, "message": ""})


@pytest.fixture
def contained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """grade_many over three files whose grading the test scripts: a dict stem -> exception raises it there."""
    problem = Problem(PROBLEM)
    files = [tmp_path / "in" / f"{stem}.py" for stem in ("ada", "boom", "cleo")]
    for file in files:
        file.parent.mkdir(exist_ok=True)
        file.write_text("# nothing to run here\n")
    monkeypatch.setattr(engine, "Zygote", _NoZygote)
    monkeypatch.setattr(engine, "Expectations", _FakeExpectations)

    def run(failures: dict[str, Exception], where: str = "grade") -> tuple[list[Report], ExitCode, Path]:
        def fake_grade(problem: Problem, file: Path, seed: int, *args: Any, **kwargs: Any) -> Graded:
            if where == "grade" and file.stem in failures:
                raise failures[file.stem]
            return Graded(_passing(problem, file, seed), None)

        real_page = pages.write_report_page

        def fake_page(problem: Problem, report: Report, out_dir: Path, previews: PreviewSource) -> Path:
            if where == "page" and Path(report.submission).stem in failures and report.status == "graded":
                raise failures[Path(report.submission).stem]
            return real_page(problem, report, out_dir, previews)

        monkeypatch.setattr(engine, "grade", fake_grade)
        monkeypatch.setattr(engine, "write_report_page", fake_page)
        out = tmp_path / "out"
        reports = engine.grade_many(
            problem, files, 1, problem.spec.limits, 2, out_of=lambda f: out / submission_folder(f.name)
        )
        code = commands._finish_class(reports, out, [submission_folder(f.name) for f in files])
        return reports, code, out

    return run


@pytest.mark.parametrize("where", ["grade", "page"])
def test_a_judge_failure_on_one_file_costs_that_file_alone(contained, where: str) -> None:
    reports, code, out = contained({"boom": RecursionError("maximum recursion depth \udcff\x1b[2J")}, where)
    by_name = {r.submission: r for r in reports}
    assert code == ExitCode.JUDGE_ERROR
    assert by_name["ada.py"].status == by_name["cleo.py"].status == "graded"
    boom = by_name["boom.py"]
    assert boom.status == "judge_error" and boom.score == 0 and boom.message == LEARNER_SENTENCE
    assert all("RecursionError" in c.message and c.learner_message == LEARNER_SENTENCE for c in boom.checks())
    assert "\x1b" not in boom.checks()[0].message
    assert load_report(out / "boom" / "report.json").status == "judge_error"  # the page failed, not the report
    assert [row["status"] for row in _rows(out / "summary.csv")] == ["graded", "judge_error", "graded"]
    assert (out / "index.html").is_file()


def test_a_reference_that_fails_still_leaves_every_file_a_report(contained, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(problem: Problem, seed: int) -> None:
        raise RuntimeError("the reference failed the toy")

    monkeypatch.setattr(engine, "Expectations", broken)
    reports, code, out = contained({})
    assert code == ExitCode.JUDGE_ERROR and [r.status for r in reports] == ["judge_error"] * 3
    assert len(_rows(out / "summary.csv")) == 3 and (out / "index.html").is_file()


def test_a_single_grade_replaces_a_stale_report_with_its_judge_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    problem = Problem(PROBLEM)
    file, out = tmp_path / "ada.py", tmp_path / "out"
    file.write_text("")
    out.mkdir()
    (out / "report.json").write_text("{}")

    def failing(*args: Any, **kwargs: Any) -> Graded:
        raise KeyError("boom")

    monkeypatch.setattr(engine, "grade", failing)
    stand_in = _FakeExpectations(problem, 1)  # not an Expectations: a stand-in with the one method used
    report = engine.grade_into(problem, file, 1, problem.spec.limits, out, stand_in)  # type: ignore[arg-type]
    assert report.status == "judge_error" and load_report(out / "report.json") == report


# ---------------------------------------------------------------------------------------------- plots


@pytest.fixture(scope="module")
def plot_problem() -> Problem:
    return Problem(PROBLEM)


def _every_series(problem: Problem, make: Any) -> dict[str, torch.Tensor]:
    names = {plot.x for plot in problem.spec.plots} | {line.y for plot in problem.spec.plots for line in plot.lines}
    return {name: make() for name in names}


@pytest.mark.parametrize(
    ("points", "dtype"),
    [(1 << 20, torch.bfloat16), (1 << 17, torch.float16), (1 << 20, torch.float32), (1 << 17, torch.float8_e4m3fn)],
)
def test_long_series_cost_the_judge_little(
    plot_problem: Problem, tmp_path: Path, points: int, dtype: torch.dtype
) -> None:
    series = _every_series(plot_problem, lambda: (torch.randn(points) * 1e3).to(dtype))
    series[plot_problem.spec.plots[0].lines[0].y][::7] = float("inf")
    started, started_cpu = time.perf_counter(), time.thread_time()
    job = PlotJob(plot_problem.spec.plots, tmp_path, preview=series)
    job.submit(series)
    # the grading thread's own CPU time: what it pays, whatever else the machine runs beside it
    submitted_cpu = time.thread_time()
    written = job.result()
    assert submitted_cpu - started_cpu < 2, "preparing a plot must not cost the grading thread"
    assert time.perf_counter() - started < PLOT_TIMEOUT_S + 5
    assert written == [plot.file for plot in plot_problem.spec.plots], job.failures
    assert all((tmp_path / file).stat().st_size < 1 << 20 for file in written)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: torch.zeros(8, dtype=torch.uint8).view(torch.bits8), "dtype torch.bits8"),
        (lambda: torch.zeros(8, dtype=torch.complex64), "dtype torch.complex64"),
        (lambda: torch.zeros(2, 4), "2 dimensions"),
        (lambda: torch.zeros(8, device="meta"), "dense CPU"),
        (lambda: [1.0, 2.0], "not a tensor"),
    ],
)
def test_a_series_that_cannot_be_drawn_is_a_missing_plot_with_a_reason(
    plot_problem: Problem, tmp_path: Path, make: Any, why: str
) -> None:
    job = PlotJob(plot_problem.spec.plots, tmp_path)
    job.submit(_every_series(plot_problem, make))
    assert job.result() == []
    assert set(job.failures) == {plot.file for plot in plot_problem.spec.plots}
    assert all(why in reason for reason in job.failures.values()) and why in job.notes()


def test_a_plot_over_its_time_limit_is_missing_with_a_reason(plot_problem: Problem, tmp_path: Path) -> None:
    job = PlotJob(plot_problem.spec.plots, tmp_path, timeout_s=0.01)
    job.submit(_every_series(plot_problem, lambda: torch.rand(64, dtype=torch.float64)))
    assert job.result() == [] and all("not drawn within" in why for why in job.failures.values())


def test_a_plotting_process_out_of_memory_is_a_missing_plot(
    plot_problem: Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(drawing.LIMITS, "address_space_bytes", 48 << 20)  # too little to import matplotlib
    job = PlotJob(plot_problem.spec.plots, tmp_path)
    job.submit(_every_series(plot_problem, lambda: torch.rand(64, dtype=torch.float64)))
    assert job.result() == [] and all("plotting process" in why for why in job.failures.values())


def test_a_learner_plot_overlays_the_reference_and_marks_the_points_out_of_tolerance(plot_problem: Problem) -> None:
    plot = plot_problem.spec.plots[0]
    reference = _every_series(plot_problem, lambda: torch.linspace(0, 1, 101, dtype=torch.float64))
    mine = {name: value.clone() for name, value in reference.items()}
    mine[plot.lines[0].y][40] = 3.0  # one point off: the kind of bug a side-by-side view hides
    tolerance = series_tolerances(plot_problem.spec.checks).get(plot.lines[0].y, Tolerance(rtol=0.0, atol=0.0))
    specs, failures = figure_specs(
        [plot], mine, Path("/nowhere"), "drawn from your functions", reference, {plot.lines[0].y: tolerance}
    )
    learner, preview = specs
    assert not failures and preview["file"] == preview_file(plot.file)
    assert [marks["x"] for marks in learner["marks"]] == [[reference[plot.x][40].item()]]
    assert len(learner["reference"]) == len(plot.lines)
    assert learner["ylim"] == preview["ylim"] and learner["xlim"] == preview["xlim"]
    assert learner["ylim"][1] > 3.0  # the wrong point is on the axes, not cut off
    assert all(spec["xlabel"] and spec["ylabel"] for spec in specs)
    assert not any(line["label"].startswith("your") for line in preview["lines"])


def test_reference_previews_never_call_a_curve_yours(plot_problem: Problem) -> None:
    series = _every_series(plot_problem, lambda: torch.linspace(0, 1, 11, dtype=torch.float64))
    specs, _ = figure_specs(plot_problem.spec.plots, series, Path("/nowhere"), as_reference=True)
    labels = [line["label"] for spec in specs for line in spec["lines"]]
    assert labels and not any(label.lower().startswith("your") for label in labels)


@pytest.mark.parametrize("stem", sorted(NOT_FILES))
def test_a_link_or_a_fifo_is_refused_with_nothing_earned(hostile: Hostile, stem: str) -> None:
    report = hostile.reports[stem]
    assert report["status"] == Status.REFUSED and report["score"] == 0, report["message"]
    assert report["message"].startswith("not graded: expected a regular file, not a")
    assert all(c["verdict"] == Verdict.SKIPPED and c["score"] == 0 for c in checks_of(report).values())


def test_an_answer_over_the_result_limit_is_named_as_the_cause(hostile: Hostile) -> None:
    """cheat_giant_tensors answers its loss with 128 MiB: the report says so at the top, not only per check."""
    report = hostile.reports["cheat_giant_tensors"]
    if report["status"] == "graded":
        assert "result limit" in report["message"]


def test_no_learner_output_quotes_the_grading_seed_series(hostile: Hostile) -> None:
    """leak_t3_expected misses every toy series by a thousandth: instructors read where and by how much, learners
    which point misses and on which side, never a value of the reference's series at the grading seed."""
    report = hostile.reports["leak_t3_expected"]
    expected = series_fingerprints(Problem(PROBLEM), report["seed"])
    t3 = [c for tier in report["tiers"] if tier["tier"] == "T3" for c in tier["checks"]]
    failing = [c for c in t3 if c["verdict"] == "fail"]
    assert failing, "the toy must fail for this file to test anything"
    assert any(f in c["message"] for c in failing for f in expected)  # the instructor's evidence keeps them
    view = learner_view(load_report(hostile.out / "leak_t3_expected" / "report.json"))
    texts = {
        "learner view": json.dumps(view),
        "report.html": (hostile.out / "leak_t3_expected" / "report.html").read_text(),
    }
    for where, text in texts.items():
        leaked = sorted(f for f in expected if f in text)
        assert not leaked, f"{where} quotes the grading seed's T3 series: {leaked[:3]}"
