"""What the terminal shows of a report: a table cell keeps "expected X, got Y" to the last, and a message it had to
shorten is printed whole below the table, in `grade` and in `watch`."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from grader.model.report import CheckResult, Report, TierResult, Versions
from grader.model.verdicts import Status, Verdict
from grader.outputs.terminal import TERMINAL_MESSAGE_CHARS, fit_message, print_report
from grader.watch.loop import MESSAGE_CHARS, render

LABEL = "bfloat16 T=8 E=6 k=1, sigmoid, bias: float32 bias, " + "a long label " * 12
LONG = (
    f"2/5 cases passed. First failure, case '{LABEL}': routed_gates[0][2, 0]: expected 0, got 0.875 "
    "(abs err 0.875); 8 of 48 elements differ (rtol 0.0079, atol 1e-05); the inputs there: "
    "router_logits[2, 0] = 1.92969, expert_bias[0] = 0.00694082"
)


def _report(message: str) -> Report:
    check = CheckResult(
        id="bf16_upcast",
        title="t",
        verdict=Verdict.FAIL,
        score=0.8,
        max_score=2,
        message=message,
        learner_message=message,
        duration_s=0,
    )
    tier = TierResult(tier="T2", title="Edges", score=0.8, max_score=2, checks=[check])
    return Report(
        problem="routed_gates",
        submission="x.py",
        submission_sha256="0" * 64,
        status=Status.GRADED,
        score=0.8,
        max_score=2,
        tiers=[tier],
        artifacts=[],
        seed=1,
        versions=Versions(python="3", torch="2", grader="0"),
        problem_hash="0",
        command="c",
    )


@pytest.mark.parametrize("limit", [TERMINAL_MESSAGE_CHARS, MESSAGE_CHARS, 60])
def test_a_cell_drops_labels_before_the_expected_and_got_values(limit: int) -> None:
    shown = fit_message(LONG, limit)
    assert len(shown) <= limit
    assert "expected 0, got 0.875" in shown
    assert "more characters" not in shown
    assert "a long label" not in shown


def test_a_message_that_fits_is_shown_as_it_is() -> None:
    assert fit_message("values differ: expected 1, got 2") == "values differ: expected 1, got 2"


def test_a_message_without_values_is_cut_with_a_count() -> None:
    shown = fit_message("x" * 1000, 100)
    assert len(shown) <= 100 and shown.endswith("more characters)")


def test_grade_prints_a_shortened_message_whole_below_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    print_report(_report(LONG), Path("report.json"))
    out = " ".join(capsys.readouterr().out.split())  # the console folds long lines
    assert "expected 0, got 0.875" in out
    assert "bf16_upcast: 2/5 cases passed. First failure, case 'bfloat16 T=8" in out
    assert "expert_bias[0] = 0.00694082" in out


def test_watch_prints_a_shortened_message_whole_below_its_table() -> None:
    console = Console(width=120, record=True)
    for part in render(_report(LONG), {}, 1.0):
        console.print(part)
    out = " ".join(console.export_text().split())
    assert "expected 0, got 0.875" in out and "expert_bias[0] = 0.00694082" in out
    assert "more characters" not in out


def test_watch_does_not_call_a_check_that_did_not_run_before_a_change() -> None:
    """After a syntax error is fixed, every check was skipped before: none of them "changed" from a verdict."""
    passing = _report("passed")
    passing.tiers[0].checks[0].verdict = Verdict.PASS
    console = Console(width=120, record=True)
    for part in render(passing, {"bf16_upcast": Verdict.SKIPPED}, 1.0):
        console.print(part)
    out = console.export_text()
    assert "was skipped" not in out and "all 1 checks pass" in out
    console = Console(width=120, record=True)
    for part in render(_report(LONG), {"bf16_upcast": Verdict.PASS}, 1.0):
        console.print(part)
    assert "(was pass)" in console.export_text()


def test_grade_says_an_import_failure_once(capsys: pytest.CaptureFixture[str]) -> None:
    failure = "importing x.py failed at line 1: SyntaxError: '(' was never closed"
    report = _report(failure)
    report.tiers[0].checks[0].verdict = Verdict.SKIPPED
    report.message = failure
    print_report(report, Path("report.json"))
    out = capsys.readouterr().out
    assert out.count("was never closed") == 1 and "not run: see below" in out
