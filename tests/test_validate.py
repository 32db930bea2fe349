"""Every problem proves its checks: `validate` passes for each one (reference at full marks on every hidden seed,
each known-wrong solution failing exactly what it declares, each misreading diagnosed as itself first)."""

from __future__ import annotations

import pytest

from grader.model.problem import list_problems
from grader.model.verdicts import ExitCode


@pytest.mark.parametrize("problem", list_problems())
def test_validate_passes(run_cli, problem: str) -> None:
    result = run_cli("validate", "--problem", problem, "--jobs", "2")
    assert result.returncode == ExitCode.OK, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{problem}: valid" in result.stdout
