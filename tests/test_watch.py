"""`watch` and the learner pack's `check --watch`: every save graded again, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, checks_of
from test_learner_pack import learner_python  # noqa: F401 - a fixture: a Python that cannot import the repo's grader

from grader.bench import save  # as editors save: a temporary file renamed over the old one
from grader.course.learner_pack import build_pack
from grader.model.problem import Problem
from grader.watch.loop import Fingerprint, SaveWatcher, fingerprint

PROBLEM = "grpo_advantages"
REFERENCE = ROOT / "reference" / PROBLEM / "reference.py"
WRONG = Problem(PROBLEM).known_wrong_file("ddof_swapped.py")  # embodies a declared misreading
FIRST_REPORT_S = 600.0  # the first grade computes the expectations and, for a wrong file, the misreadings' data
SAVE_REPORT_S = 180.0


# ---------------------------------------------------------------------------------------------- processes


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of a process; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(root: int) -> dict[int, int]:
    """Every live process below `root` (by parent pid), with its start time, so a reused pid is not mistaken."""
    parents: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None and stat[0] != "Z":
            parents.setdefault(stat[1], []).append((int(entry.name), stat[2]))
    found, pending = {}, [root]
    while pending:
        for pid, started in parents.get(pending.pop(), []):
            found[pid] = started
            pending.append(pid)
    return found


def survivors(seen: dict[int, int], marker: str, grace_s: float = 5.0) -> list[str]:
    """Processes of `seen` still alive (zombies count as ended), or any whose command line names `marker`."""
    deadline = time.monotonic() + grace_s
    while True:
        left = [
            f"{pid} {_cmdline(pid)}"
            for pid, started in seen.items()
            if (stat := _stat(pid)) is not None and stat[2] == started and stat[0] != "Z"
        ]
        left += [
            f"{entry.name} {_cmdline(int(entry.name))}"
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit()
            and int(entry.name) != os.getpid()
            and marker in _cmdline(int(entry.name))
            and (_stat(int(entry.name)) or ("Z",))[0] != "Z"
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def not_plotting(pids: dict[int, int]) -> list[int]:
    """The processes of `pids` that are not the plotting server or a drawing process forked from it."""
    return [pid for pid in pids if "grader.outputs.figures" not in _cmdline(pid)]


class Watched:
    """A `watch` (or `check --watch`) process, its output, and every process ever seen below it."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._handle = log.open("w")
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdout=self._handle, stderr=subprocess.STDOUT)
        self.seen: dict[int, int] = {}

    def look(self) -> dict[int, int]:
        now = descendants(self.process.pid)
        self.seen.update(now)
        return now

    def wait_for(self, report: Path, ready: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.look()
            try:
                found = json.loads(report.read_text())
            except (OSError, ValueError):
                found = None
            if found is not None and ready(found):
                return found
            assert self.process.poll() is None, f"ended with {self.process.returncode}:\n{self.output()}"
            time.sleep(0.05)
        raise AssertionError(f"no report for the save within {timeout:g} s:\n{self.output()}")

    def interrupt(self, timeout: float = 60) -> int:
        self.look()
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self._handle.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def end(self, timeout: float = 60) -> int:
        """Wait for the process, which was told to stop, and close its log."""
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self._handle.close()


# ---------------------------------------------------------------------------------------------- watch


@pytest.mark.e2e
def test_watch_grades_each_save_and_ctrl_c_leaves_nothing(cli_env: dict[str, str], tmp_path: Path) -> None:
    folder = tmp_path / "learner"
    folder.mkdir()
    file, out = folder / "solution.py", tmp_path / "out"
    first = save(file, WRONG)
    watched = Watched(
        [sys.executable, "-m", "grader", "watch", str(file), "--problem", PROBLEM, "--out", str(out)],
        ROOT,
        cli_env,
        tmp_path / "watch.log",
    )
    try:
        wrong = watched.wait_for(out / "report.json", lambda r: r["submission_sha256"] == first, FIRST_REPORT_S)
        assert wrong["status"] == "graded" and wrong["score"] < wrong["max_score"]
        assert checks_of(wrong)["unbiased_ddof"]["verdict"] == "fail"
        assert "unbiased_flag_inverted" in [entry["id"] for entry in wrong["diagnosis"]]

        second = save(file, REFERENCE)
        right = watched.wait_for(out / "report.json", lambda r: r["submission_sha256"] == second, SAVE_REPORT_S)
        assert right["status"] == "graded" and right["score"] == right["max_score"]
        assert right["submission"] == "solution.py" and str(file.name) in right["command"]
        assert sorted(right["artifacts"]) == sorted(p.file for p in Problem(PROBLEM).spec.plots)
        assert all((out / name).is_file() for name in right["artifacts"])
        assert (out / "report.html").is_file()

        third = save(file, WRONG)  # and Ctrl-C while it is being graded, once its worker is up
        deadline = time.monotonic() + SAVE_REPORT_S
        worker_seen = False  # the zygote is always there, and the plotting processes; another one is a worker
        while not worker_seen and time.monotonic() < deadline and watched.process.poll() is None:
            worker_seen = len(not_plotting(watched.look())) > 1
            time.sleep(0.02)
        assert worker_seen, "no worker was ever seen below watch"
    finally:
        code = watched.interrupt()
    text = watched.output()
    assert code == 0, text
    assert "unbiased_ddof" in text and "pass (was fail)" in text, text  # the changed verdict is pointed out
    assert f"all {len(Problem(PROBLEM).spec.checks)} checks pass" in text, text
    assert text.index("likely misreading") < text.index("unbiased_ddof"), "the diagnosis comes first"
    assert "stopped watching" in text
    assert not survivors(watched.seen, str(folder)), "a process outlived watch"
    assert third  # graded or not, what matters is that nothing is left


@pytest.mark.e2e
def test_watch_reports_a_half_saved_file_and_goes_on(cli_env: dict[str, str], tmp_path: Path) -> None:
    folder = tmp_path / "learner"
    folder.mkdir()
    file, out = folder / "solution.py", tmp_path / "out"
    source = REFERENCE.read_text()
    file.write_text(source[: len(source) // 2] + "\ndef broken(:\n")  # an editor caught mid-save
    broken = hashlib.sha256(file.read_bytes()).hexdigest()
    watched = Watched(
        [
            sys.executable,
            "-m",
            "grader",
            "watch",
            str(file),
            "--problem",
            PROBLEM,
            "--out",
            str(out),
            "--debounce",
            "0.1",
        ],
        ROOT,
        cli_env,
        tmp_path / "watch.log",
    )
    try:
        report = watched.wait_for(out / "report.json", lambda r: r["submission_sha256"] == broken, FIRST_REPORT_S)
        assert report["status"] == "import_error" and "SyntaxError" in report["message"]
        fixed = save(file, REFERENCE)
        report = watched.wait_for(out / "report.json", lambda r: r["submission_sha256"] == fixed, SAVE_REPORT_S)
        assert report["score"] == report["max_score"]
    finally:
        os.kill(watched.process.pid, signal.SIGTERM) if watched.process.poll() is None else None
        code = watched.end()
    assert code == 0, watched.output()
    assert "checks not run, for the reason above" in watched.output()
    assert not survivors(watched.seen, str(folder))


def test_watch_refuses_a_missing_file(run_cli, tmp_path: Path) -> None:
    result = run_cli("watch", tmp_path / "nope.py", "--problem", PROBLEM)
    assert result.returncode == 4 and "no such file" in result.stderr
    result = run_cli("watch", REFERENCE, "--problem", PROBLEM, "--debounce", "-1")
    assert result.returncode == 4 and "--debounce" in result.stderr


# ---------------------------------------------------------------------------------------------- the save watcher


def test_a_grade_is_published_only_if_the_file_still_holds_what_was_graded(tmp_path: Path) -> None:
    file = tmp_path / "solution.py"
    file.write_text("x = 1\n")
    watcher = SaveWatcher(file, poll_s=0.01)
    snapshot = watcher.next_version()
    try:
        assert snapshot.submission.data == b"x = 1\n" and snapshot.submission.name == file.name
        assert watcher.settled(snapshot, debounce_s=0.05)
        file.write_text("x = 2\n")  # saved again while the snapshot was being graded
        assert not watcher.settled(snapshot, debounce_s=0.05)
    finally:
        snapshot.discard()
    watcher.graded = fingerprint(file)
    assert isinstance(watcher.graded, Fingerprint)
    started = time.monotonic()
    os.utime(file)  # touched, same bytes: a new version all the same (an editor's save)
    again = watcher.next_version()
    again.discard()
    assert time.monotonic() - started < 5


def test_a_same_size_edit_is_a_new_version(tmp_path: Path) -> None:
    file = tmp_path / "solution.py"
    file.write_text("x = 1\n")
    before = fingerprint(file)
    stat = file.stat()
    file.write_text("x = 2\n")
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same modification time
    assert fingerprint(file) != before


# ---------------------------------------------------------------------------------------------- the learner pack


@pytest.mark.e2e
def test_check_watch_in_the_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, learner_python: Path) -> None:  # noqa: F811 - the fixture imported above
    monkeypatch.setenv("PAPERLEET_CACHE", str(tmp_path / "cache"))  # never the repository's own cache
    build_pack(Problem(PROBLEM), tmp_path / "pack.zip")
    with zipfile.ZipFile(tmp_path / "pack.zip") as archive:
        archive.extractall(tmp_path / "unzipped")
    root = tmp_path / "unzipped" / PROBLEM
    folder = tmp_path / "learner"
    folder.mkdir()
    file = folder / "solution.py"
    save(file, WRONG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAPERLEET_")} | {"COLUMNS": "160"}
    report = root / "reports" / "solution.json"
    watched = Watched([str(learner_python), "check", "--watch", str(file)], root, env, tmp_path / "check.log")
    try:
        # the learner's view of a report names no hash of the file: the two versions differ in their scores
        wrong = watched.wait_for(report, lambda r: r["score"] < r["max_score"], FIRST_REPORT_S)
        assert wrong["scope"] == "public cases" and wrong["status"] == "graded"
        save(file, REFERENCE)
        right = watched.wait_for(report, lambda r: r["score"] == r["max_score"], SAVE_REPORT_S)
        assert right["status"] == "graded" and "hidden_checks" in right
    finally:
        code = watched.interrupt()
    assert code == 0, watched.output()
    assert "(was fail)" in watched.output()
    assert not survivors(watched.seen, str(folder))


# ---------------------------------------------------------------------------------------------- the warm judge


@pytest.mark.e2e
def test_warm_judge_discards_keeps_and_redraws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A grade not published writes nothing; the next one is drawn in full; one whose toy gave the same series
    keeps the plots on disk; a change of series draws them again."""
    from grader.watch.loop import Snapshot
    from grader.watch.warm import WarmJudge

    monkeypatch.setenv("PAPERLEET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PAPERLEET_ARTIFACTS", str(tmp_path / "artifacts"))
    problem = Problem(PROBLEM)
    file, out = tmp_path / "learner" / "solution.py", tmp_path / "out"
    file.parent.mkdir()
    judge = WarmJudge(problem, file, problem.grading_seeds[0], problem.spec.limits, out)
    plots = sorted(p.file for p in problem.spec.plots)
    shown: list[Any] = []

    def grade(source: Path, publish: bool) -> Any:
        save(file, source)
        snapshot = Snapshot(file, fingerprint(file), time.monotonic())  # type: ignore[arg-type]
        try:
            return judge.grade(snapshot, lambda: publish, shown.append)
        finally:
            snapshot.discard()

    try:
        judge.start()
        assert grade(REFERENCE, publish=False) is None
        assert not (out / "report.json").exists() and not shown
        drawn = grade(REFERENCE, publish=True)
        assert drawn.report.score == drawn.report.max_score and sorted(drawn.report.artifacts) == plots
        assert shown == [drawn.report]
        stamps = {name: (out / name).stat().st_mtime_ns for name in plots}
        time.sleep(0.05)
        same_toy = Problem(PROBLEM).known_wrong_file("default_unbiased_true.py")  # its toy series are the same
        kept = grade(same_toy, publish=True)
        assert sorted(kept.report.artifacts) == plots
        assert {name: (out / name).stat().st_mtime_ns for name in plots} == stamps, "the plots were drawn again"
        changed = grade(Problem(PROBLEM).known_wrong_file("always_normalizes.py"), publish=True)
        assert any((out / name).stat().st_mtime_ns != stamps[name] for name in changed.report.artifacts)
        zygote = judge.zygote
        assert zygote is not None and zygote.process.poll() is None
    finally:
        judge.close()
    assert zygote.process.poll() is not None
