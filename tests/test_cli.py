"""The command line end to end, in temporary folders: hostile submissions, determinism, exit codes, artifacts."""

from __future__ import annotations

import csv
import http.server
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, ROOT, SAMPLES, SMALL_LIMITS, SYNTAX_ERROR, SYNTAX_ERROR_LINE, Batch, checks_of

from grader.cli import REQUIRED_PACKAGES, main
from grader.commands import submission_files
from grader.engine import exit_code
from grader.model.problem import Problem
from grader.model.report import Report, reproduce_command
from grader.model.verdicts import ExitCode, Status, Verdict
from grader.outputs.pages import render_report_page

TIMING_KEYS = {"duration_s"}
DROPPED_KEYS = {"phases"}  # per-phase seconds


@pytest.fixture
def run_main(capsys: pytest.CaptureFixture[str]):
    """The CLI in this process, for commands that fail before grading anything: (exit code, stderr)."""

    def run(*args: str | Path) -> tuple[int, str]:
        code = main([str(a) for a in args])
        return code, capsys.readouterr().err

    return run


def _without_timings(value: Any) -> Any:
    """A report with every timing zeroed, output lines sorted and the worker slot's uid left out."""
    if isinstance(value, dict):
        clean: dict[str, Any] = {
            k: 0.0 if k in TIMING_KEYS else _without_timings(v) for k, v in value.items() if k not in DROPPED_KEYS
        }
        if isinstance(clean.get("isolation"), dict):
            clean["isolation"]["uid"] = None  # one uid per concurrent slot, whichever was free
        for stream in ("stdout", "stderr"):
            if isinstance(clean.get(stream), str):
                clean[stream] = sorted(clean[stream].splitlines())
        return clean
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_batch_exits_ok_and_writes_every_report(sample_batch: Batch, sample_folder: Path) -> None:
    assert sample_batch.result.returncode == ExitCode.OK, sample_batch.result.stderr
    assert set(sample_batch.reports) == {p.stem for p in sample_folder.glob("*.py")}


def test_summary_has_one_row_per_file(sample_batch: Batch, sample_folder: Path) -> None:
    with (sample_batch.out / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(r["submission"] for r in rows) == sorted(p.name for p in sample_folder.glob("*.py"))
    for row in rows:
        report = sample_batch.reports[Path(row["submission"]).stem]
        assert (row["status"], float(row["score"])) == (report["status"], report["score"])


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("hostile_exit_at_import", Status.IMPORT_CRASHED),
        ("hostile_sys_exit_at_import", Status.IMPORT_ERROR),
        ("hostile_hang_at_import", Status.IMPORT_TIMEOUT),
        ("broken_syntax", Status.IMPORT_ERROR),
    ],
)
def test_failed_import_skips_every_check(sample_batch: Batch, name: str, status: Status) -> None:
    report = sample_batch.reports[name]
    assert report["status"] == status
    assert report["score"] == 0
    assert {c["verdict"] for c in checks_of(report).values()} == {Verdict.SKIPPED}
    assert all(c["message"] == report["message"] for c in checks_of(report).values())


def test_import_failure_messages_say_what_happened(sample_batch: Batch) -> None:
    messages = {name: sample_batch.reports[name]["message"] for name in sample_batch.reports}
    assert "status 3" in messages["hostile_exit_at_import"]
    assert "SystemExit" in messages["hostile_sys_exit_at_import"]
    assert "10 s" in messages["hostile_hang_at_import"]
    assert f"line {SYNTAX_ERROR_LINE}" in messages["broken_syntax"]
    assert "SyntaxError" in messages["broken_syntax"]


def test_hang_at_import_is_cut_at_the_import_timeout(sample_batch: Batch) -> None:
    assert sample_batch.reports["hostile_hang_at_import"]["duration_s"] < 25


def test_hang_in_a_call_times_out_within_the_budget(sample_batch: Batch) -> None:
    report = sample_batch.reports["hostile_hang_in_call"]
    verdicts = {c["id"]: c["verdict"] for c in checks_of(report).values()}
    assert report["status"] == Status.BUDGET_EXCEEDED
    assert Verdict.TIMEOUT in verdicts.values()
    # a restart that the budget cannot afford reads as crashed
    calling = {c: v for c, v in verdicts.items() if c != "signatures"}
    assert set(calling.values()) <= {Verdict.TIMEOUT, Verdict.SKIPPED, Verdict.CRASHED}
    # the signatures are the contract's, but no call returned: the signature check fails too, and nothing is earned
    assert verdicts["signatures"] == Verdict.FAIL and report["score"] == 0
    assert report["duration_s"] < 40 + 15  # the budget, plus killing and reporting


def test_segfault_costs_only_the_crashing_case(sample_batch: Batch) -> None:
    report = sample_batch.reports["hostile_segfault_in_call"]
    checks = checks_of(report)
    crashed = checks["weights_contract"]
    assert report["status"] == Status.GRADED
    assert crashed["verdict"] == Verdict.CRASHED and "SIGSEGV" in crashed["message"]
    assert (crashed["cases_passed"], crashed["cases_total"]) == (3, 4)
    assert [c for c in checks.values() if c["verdict"] != Verdict.PASS] == [crashed]  # the worker restarted


def test_sys_exit_in_a_call_is_an_error_not_a_crash(sample_batch: Batch) -> None:
    report = sample_batch.reports["hostile_sys_exit_in_call"]
    checks = checks_of(report)
    assert report["status"] == Status.GRADED
    assert checks["weights_contract"]["verdict"] == Verdict.ERROR
    assert "SystemExit" in checks["weights_contract"]["message"]
    assert Verdict.CRASHED not in {c["verdict"] for c in checks.values()}


def test_missing_function_says_what_was_expected(sample_batch: Batch) -> None:
    checks = checks_of(sample_batch.reports["broken_missing_function"])
    assert checks["signatures"]["verdict"] == Verdict.FAIL
    assert "offpolicy_loss is not defined" in checks["signatures"]["message"]
    assert "offpolicy_loss(logp, rollout_logp, advantages, mask" in checks["signatures"]["message"]
    assert checks["loss_contract"]["verdict"] == Verdict.ERROR
    assert "offpolicy_loss is not defined" in checks["loss_contract"]["message"]


def test_wrong_parameter_names_say_what_was_expected(sample_batch: Batch) -> None:
    signatures = checks_of(sample_batch.reports["broken_wrong_params"])["signatures"]
    assert signatures["cases_passed"] == 0  # advantages is misnamed in the second function
    assert "masked_is_weights has no parameter named logp, rollout_logp, clip_low, clip_high" in signatures["message"]
    assert "expected `masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2)" in signatures["message"]


@pytest.mark.parametrize("name", ["torch", "grader"])
def test_file_named_like_a_module_grades_normally(sample_batch: Batch, name: str) -> None:
    baseline, report = sample_batch.reports["correct_compact"], sample_batch.reports[name]
    assert baseline["score"] == 100
    assert report["submission"] == f"{name}.py"
    assert _verdicts(report) == _verdicts(baseline) and report["score"] == baseline["score"]


def _verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {check_id: check["verdict"] for check_id, check in checks_of(report).items()}


def test_same_file_graded_twice_gives_the_same_report(
    run_cli, sample_batch: Batch, sample_folder: Path, tmp_path: Path
) -> None:
    result = run_cli(
        "grade", sample_folder / "correct_compact.py", "--problem", PROBLEM, "--out", tmp_path, *SMALL_LIMITS
    )
    assert result.returncode == ExitCode.OK, result.stderr
    again = json.loads((tmp_path / "report.json").read_text())
    assert _without_timings(again) == _without_timings(sample_batch.reports["correct_compact"])


def test_missing_file_is_a_usage_error(run_main, tmp_path: Path) -> None:
    code, err = run_main("grade", tmp_path / "nowhere.py", "--problem", PROBLEM, "--out", tmp_path / "out")
    assert code == ExitCode.USAGE
    assert "no such file" in err
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.parametrize("command", ["grade", "grade-all"])
def test_unknown_problem_is_a_usage_error(run_main, tmp_path: Path, command: str) -> None:
    target = [tmp_path / "solution.py"] if command == "grade" else []
    (tmp_path / "solution.py").write_text("")
    code, err = run_main(command, *target, "--problem", "no_such_problem", "--out", tmp_path / "out")
    assert code == ExitCode.USAGE
    assert "unknown problem 'no_such_problem'" in err and PROBLEM in err


def test_empty_folder_is_a_usage_error(run_main, tmp_path: Path) -> None:
    code, err = run_main("grade-all", "--problem", PROBLEM, "--submissions", tmp_path, "--out", tmp_path / "out")
    assert code == ExitCode.USAGE
    assert "no *.py submissions" in err


def test_help_documents_the_exit_codes(run_cli) -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert all(f"{code.value} {code.name.lower()}" in result.stdout for code in ExitCode)
    readme = (ROOT / "README.md").read_text()
    assert all(re.search(rf"^\| {code.value} \|", readme, re.MULTILINE) for code in ExitCode), "README's exit codes"


# ---------------------------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    "args",
    [
        ["grade"],
        ["grade", "x.py"],
        ["grade-all", "--problem", PROBLEM, "--jobs", "abc"],
        ["grade", "x.py", "--problem", PROBLEM, "--fail-under", "lots"],
        ["no-such-command"],
    ],
)
def test_argparse_errors_exit_with_the_usage_code(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == ExitCode.USAGE
    assert "error:" in capsys.readouterr().err


def test_bad_limits_are_one_line_usage_errors(run_main, tmp_path: Path) -> None:
    (tmp_path / "solution.py").write_text("")
    code, err = run_main(
        "grade",
        tmp_path / "solution.py",
        "--problem",
        PROBLEM,
        "--call-timeout",
        "-1",
        "--memory-mb",
        "10",
        "--out",
        tmp_path / "out",
    )
    assert code == ExitCode.USAGE
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "judge error" not in err
    assert "--call-timeout -1" in err and "--memory-mb 10" in err
    assert not (tmp_path / "out").exists()


def test_grading_a_folder_says_it_is_a_folder(run_main, tmp_path: Path) -> None:
    code, err = run_main("grade", tmp_path, "--problem", PROBLEM, "--out", tmp_path / "out")
    assert code == ExitCode.USAGE
    assert "is a folder" in err and "no such file" not in err and "grade-all" in err


def test_missing_submissions_folder_says_no_such_folder(run_main, tmp_path: Path) -> None:
    code, err = run_main("grade-all", "--problem", PROBLEM, "--submissions", tmp_path / "nowhere", "--out", tmp_path)
    assert code == ExitCode.USAGE
    assert "no such folder" in err and "no *.py" not in err


def test_a_python_without_the_grader_packages_gets_a_one_line_hint(tmp_path: Path) -> None:
    """Outside the project's environment (no torch, no pydantic) the command says what to run instead."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "grader", "grade", "submissions/x.py", "--problem", PROBLEM],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert ".venv/bin/python -m grader" in done.stderr and "make setup" in done.stderr


def test_the_packages_looked_for_first_are_the_projects_dependencies() -> None:
    """The hint comes before any import, from a list of packages: that list is pyproject.toml's, no shorter."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert set(REQUIRED_PACKAGES) == {re.split(r"[<>=!~\[ ;]", line, maxsplit=1)[0] for line in declared}


# ---------------------------------------------------------------------------------------------- exit codes for CI


def _report(data: dict[str, Any], **changes: Any) -> Report:
    return Report.model_validate({**data, **changes})


def test_exit_codes_for_import_failures_and_fail_under(sample_batch: Batch) -> None:
    full, broken = sample_batch.reports["correct_compact"], sample_batch.reports["broken_syntax"]
    assert exit_code([_report(full)], fail_under=100, import_fails=True) == ExitCode.OK
    assert exit_code([_report(full)], fail_under=100.5) == ExitCode.BELOW_FAIL_UNDER
    assert exit_code([_report(broken)], import_fails=True) == ExitCode.IMPORT_FAILED
    assert exit_code([_report(broken), _report(full)]) == ExitCode.OK, "grade-all: a class with a broken file"
    assert exit_code([_report(broken), _report(full)], fail_under=1) == ExitCode.BELOW_FAIL_UNDER
    judged = _report(full, status=Status.JUDGE_ERROR)
    assert exit_code([judged, _report(broken)], fail_under=1, import_fails=True) == ExitCode.JUDGE_ERROR


def test_a_file_that_does_not_import_fails_grade_and_its_junit(run_cli, tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(SYNTAX_ERROR)
    result = run_cli(
        "grade",
        tmp_path / "broken.py",
        "--problem",
        PROBLEM,
        "--out",
        tmp_path / "out",
        "--junit",
        tmp_path / "junit.xml",
        *SMALL_LIMITS,
    )
    assert result.returncode == ExitCode.IMPORT_FAILED, result.stderr
    root = ET.fromstring((tmp_path / "junit.xml").read_text())
    assert int(root.get("errors", -1)) == int(root.get("tests", -1)) > 0 and not list(root.iter("skipped"))


# ---------------------------------------------------------------------------------------------- which files


def test_grade_all_takes_python_files_in_any_case_and_names_what_it_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("ada.py", "BEN.PY", "._ada.py", "notes.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "__pycache__").mkdir()
    assert [p.name for p in submission_files(tmp_path)] == ["BEN.PY", "ada.py"]
    said = capsys.readouterr().out
    assert "._ada.py" in said and "resource fork" in said and "notes.txt" in said


# ---------------------------------------------------------------------------------------------- where grades go


@pytest.fixture
def outside_grade(run_cli, cli_env: dict[str, str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A file from outside the class, with the stem of a learner's file, graded without --out."""
    learner = next(p for p in (ROOT / "submissions" / PROBLEM).glob("*.py"))
    outside = tmp_path / learner.name
    shutil.copyfile(SAMPLES / "correct_compact.py", outside)
    class_report = Path(cli_env["PAPERLEET_ARTIFACTS"]) / PROBLEM / learner.stem / "report.json"
    class_report.parent.mkdir(parents=True, exist_ok=True)
    class_report.write_text('{"the class report": "of the learner"}')
    result = run_cli("grade", outside, "--problem", PROBLEM, "--fail-under", "100.5")  # the problem's own limits
    assert class_report.read_text() == '{"the class report": "of the learner"}', "the class report was replaced"
    return result, Path(cli_env["PAPERLEET_ARTIFACTS"]) / "single" / PROBLEM / learner.stem


def test_a_file_from_elsewhere_never_replaces_a_class_report(outside_grade) -> None:
    result, out = outside_grade
    assert result.returncode == ExitCode.BELOW_FAIL_UNDER, result.stderr  # full marks, below 100.5
    report = json.loads((out / "report.json").read_text())
    assert report["score"] == report["max_score"] == 100
    assert str(out / "report.json") in result.stdout.replace("\n", "")


def test_the_printed_command_reproduces_the_grade_from_the_project_root(
    outside_grade, cli_env: dict[str, str], tmp_path: Path
) -> None:
    _, out = outside_grade
    report = json.loads((out / "report.json").read_text())
    command = shlex.split(report["command"])
    assert command[:4] == [".venv/bin/python", "-m", "grader", "grade"] and Path(command[4]).is_absolute()
    python = ROOT / ".venv" / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv in the project root (`make setup` makes it)")
    again = subprocess.run(
        [*command, "--out", str(tmp_path / "again")], cwd=ROOT, env=cli_env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == ExitCode.OK, again.stderr
    assert json.loads((tmp_path / "again" / "report.json").read_text())["score"] == report["score"]


def test_reproduce_commands_are_relative_to_the_project_root(
    monkeypatch: pytest.MonkeyPatch, submission_batch: Batch
) -> None:
    monkeypatch.chdir(ROOT / "tests")
    assert reproduce_command(PROBLEM, Path("samples/x.py"), 7) == (
        f".venv/bin/python -m grader grade tests/samples/x.py --problem {PROBLEM} --seed 7"
    )
    for stem, report in submission_batch.reports.items():
        assert f" submissions/{PROBLEM}/{stem}.py " in report["command"], report["command"]
        assert report["command"].startswith(".venv/bin/python -m grader grade ")


def test_previews_have_the_learners_plot_names(run_cli, submission_batch: Batch, tmp_path: Path) -> None:
    result = run_cli("previews", "--problem", PROBLEM, "--out", tmp_path)
    assert result.returncode == ExitCode.OK, result.stderr
    previews = sorted(p.name for p in tmp_path.glob("*.png"))
    learner = sorted(p.name for p in (submission_batch.out / "alice_loops").glob("*.png"))
    assert previews == learner == sorted(plot.file for plot in Problem(PROBLEM).spec.plots)
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in tmp_path.glob("*.png"))
    drawn = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.png")}
    again = run_cli("previews", "--problem", PROBLEM, "--out", tmp_path)
    assert again.returncode == ExitCode.OK and "up to date" in again.stdout, again.stdout + again.stderr
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.png")} == drawn, "drawn again for nothing"
    (tmp_path / ".drawn").write_text("drawn from other inputs")  # the problem or the plotting code changed
    redrawn = run_cli("previews", "--problem", PROBLEM, "--out", tmp_path)
    assert "wrote" in redrawn.stdout and all(p.stat().st_mtime_ns > drawn[p.name] for p in tmp_path.glob("*.png"))


# ---------------------------------------------------------------------------------------------- the report page


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.texts.append(data.strip())


def _page(report: dict[str, Any]) -> str:
    return render_report_page(_report(report), [])


@pytest.mark.parametrize("name", ["broken_syntax", "hostile_segfault_in_call", "correct_compact"])
def test_report_page_has_no_dangling_colon(sample_batch: Batch, name: str) -> None:
    parser = _Text()
    parser.feed(_page(sample_batch.reports[name]))
    assert not [t for t in parser.texts if t.endswith(":")]


def test_report_page_opens_with_what_failed(sample_batch: Batch) -> None:
    page = _page(sample_batch.reports["hostile_segfault_in_call"])
    summary = page[page.index('id="summary"') : page.index("<h2>Tiers")]
    assert "What failed" in summary and 'href="#check-weights_contract"' in summary and "crashed" in summary
    assert "signatures" not in summary
    assert "Every check passed" in _page(sample_batch.reports["correct_compact"])
    assert "could not be imported" in _page(sample_batch.reports["broken_syntax"])


def test_report_page_explains_the_visibility_tags(sample_batch: Batch) -> None:
    page = _page(sample_batch.reports["correct_compact"])
    assert 'class="tag" title="learners see its result once grades are published"' in page
    assert "once grades are published; this page shows every result" in page


def test_report_page_scores_are_rounded_once(sample_batch: Batch) -> None:
    report = _report(sample_batch.reports["correct_compact"])
    check = report.tiers[0].checks[0]
    check.score = check.max_score * 7 / 12
    assert f"{round(check.max_score * 7 / 12, 2):g}/{check.max_score:g}" in render_report_page(report, [])


# ---------------------------------------------------------------------------------------------- docs


def test_readme_leads_learners_to_the_learner_pack() -> None:
    readme = (ROOT / "README.md").read_text()
    learners = readme[readme.index("## For learners") : readme.index("## For graders")]
    assert "learner pack" in learners and "python check my_solution.py" in learners
    assert "cp problems/" not in learners and "reference/" not in learners
    assert "paperleet" in readme and "TORCH=cuda" in readme
    exports = (ROOT / "docs" / "exports.md").read_text()
    caveat = exports[exports.index("Keep the virtual environment out of `/tmp`") :]
    assert "namespaces+uid" in caveat[:400] and "limits-only" in caveat[:400]


# ---------------------------------------------------------------------------------------------- make setup


def _make(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_make_setup_installs_the_cpu_build_from_pytorchs_index(tmp_path: Path) -> None:
    plan = _make("-n", "setup", f"VENV={tmp_path / 'venv'}").stdout
    torch_lines = [line for line in plan.splitlines() if "torch==2.13.0" in line]
    assert torch_lines and "--index-url https://download.pytorch.org/whl/cpu" in torch_lines[0]
    assert "--extra-index-url" not in plan
    rest = next(line for line in plan.splitlines() if "-e '.[dev]'" in line)
    assert "numpy" in rest and "--index-url" not in rest, "numpy and the project come from the configured index"
    cuda = _make("-n", "setup", f"VENV={tmp_path / 'venv'}", "TORCH=cuda").stdout
    assert "torch==2.13.0" in cuda and "download.pytorch.org" not in cuda


def test_make_grade_refuses_bad_jobs_before_any_work() -> None:
    started = time.monotonic()
    done = _make("grade", "JOBS=abc")
    assert done.returncode != 0 and "JOBS=abc" in done.stderr
    assert "grader" not in done.stdout and time.monotonic() - started < 10


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def scratch_venv(tmp_path: Path) -> Path:
    """A venv that sees this environment's packages (torch, pip) through a plain path, so pip finds torch
    2.13.0 already installed and downloads nothing."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "host-packages.pth").write_text(next(p for p in sys.path if p.endswith("site-packages")) + "\n")
    return venv


def test_make_torch_falls_back_quickly_when_pytorchs_index_is_out_of_reach(scratch_venv: Path) -> None:
    started = time.monotonic()
    done = _make("torch", f"VENV={scratch_venv}", f"TORCH_INDEX=http://127.0.0.1:{_free_port()}/whl/cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(
        r"^setup: .* is out of reach; installing torch 2.13.0 from the configured index$", done.stdout, re.MULTILINE
    )
    assert time.monotonic() - started < 60


@pytest.fixture
def loopback_index(tmp_path: Path) -> Iterator[str]:
    """A package index on loopback that answers for torch (with no files: pip must not need any)."""
    (tmp_path / "index" / "torch").mkdir(parents=True)
    (tmp_path / "index" / "torch" / "index.html").write_text("<html><body></body></html>")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path / "index"))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_make_torch_uses_pytorchs_index_when_it_answers(scratch_venv: Path, loopback_index: str) -> None:
    done = _make("torch", f"VENV={scratch_venv}", f"TORCH_INDEX={loopback_index}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not re.search("^setup: ", done.stdout, re.MULTILINE) and f"--index-url {loopback_index}" in done.stdout
