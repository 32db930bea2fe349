"""The command line end to end, in temporary folders: hostile submissions, determinism, exit codes, artifacts."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, SMALL_LIMITS, SYNTAX_ERROR_LINE, Batch, checks_of

from grader.cli import main
from grader.problem import Problem
from grader.verdicts import ExitCode, Status, Verdict

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
        clean = {k: 0.0 if k in TIMING_KEYS else _without_timings(v) for k, v in value.items() if k not in DROPPED_KEYS}
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


@pytest.mark.parametrize(("name", "status"), [
    ("hostile_exit_at_import", Status.IMPORT_CRASHED),
    ("hostile_sys_exit_at_import", Status.IMPORT_ERROR),
    ("hostile_hang_at_import", Status.IMPORT_TIMEOUT),
    ("broken_syntax", Status.IMPORT_ERROR),
])
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
    assert set(verdicts.values()) <= {Verdict.PASS, Verdict.TIMEOUT, Verdict.SKIPPED, Verdict.CRASHED}
    assert [c for c, v in verdicts.items() if v == Verdict.PASS] == ["signatures"]
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


def test_same_file_graded_twice_gives_the_same_report(run_cli, sample_batch: Batch, sample_folder: Path,
                                                      tmp_path: Path) -> None:
    result = run_cli("grade", sample_folder / "correct_compact.py", "--problem", PROBLEM, "--out", tmp_path,
                     *SMALL_LIMITS)
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


def test_previews_have_the_learners_plot_names(run_cli, submission_batch: Batch, tmp_path: Path) -> None:
    result = run_cli("previews", "--problem", PROBLEM, "--out", tmp_path)
    assert result.returncode == ExitCode.OK, result.stderr
    previews = sorted(p.name for p in tmp_path.glob("*.png"))
    learner = sorted(p.name for p in (submission_batch.out / "alice_loops").glob("*.png"))
    assert previews == learner == sorted(plot.file for plot in Problem(PROBLEM).spec.plots)
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in tmp_path.glob("*.png"))


@pytest.mark.slow
def test_validate_passes(run_cli) -> None:
    result = run_cli("validate", "--problem", PROBLEM, "--jobs", "2")
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    assert "valid" in result.stdout
