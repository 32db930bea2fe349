"""The expectations cache: misreadings' observations kept apart and read only when a case fails; one thread."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.judge.expectations import (
    GRADER_DIR,
    Expectations,
    _write,
    computation_files,
    identical,
    load_cache_file,
    single_threaded,
)
from grader.model.problem import Problem
from grader.worker.protocol import ProtocolError

PROBLEM = "grpo_advantages"


def test_misconception_observations_are_saved_apart_and_read_back_when_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAPERLEET_CACHE", str(tmp_path))
    problem = Problem(PROBLEM)
    assert problem.misconceptions
    seed = problem.grading_seeds[0]
    check = next(c for c in problem.spec.checks if c.cases)
    assert check.cases is not None
    first = Expectations(problem, seed)
    first.warm()
    computed = first.misconception_observations(check.cases, 0)
    first.persist()

    (main,) = (tmp_path / PROBLEM).glob("*.pt")
    data = load_cache_file(main)
    assert data["observations"] and not [k for k in data["observations"] if k.startswith("misconception:")]
    assert (main.with_suffix("") / f"misconceptions-{check.cases}.pt").is_file()

    def recomputed(self: Problem, misconception: object) -> None:
        raise AssertionError("a misreading's observations were computed again rather than read from the cache")

    monkeypatch.setattr(Problem, "misconception_functions", recomputed)
    again = Expectations(problem, seed).misconception_observations(check.cases, 0)
    assert again.keys() == computed.keys()
    for name, observation in computed.items():
        assert torch.equal(again[name]["output"]["value"], observation["output"]["value"])


def test_the_cache_key_covers_the_code_that_computes_expectations_and_not_the_plots() -> None:
    """An edit to the plots, the report, the sandbox or the command line keeps every problem's cached expectations."""
    files = {path.relative_to(GRADER_DIR).as_posix() for path in computation_files()}
    assert {"judge/expectations.py", "judge/cases.py", "judge/experiment.py", "worker/protocol.py"} <= files
    assert {"model/problem.py", "model/known_wrong.py", "__init__.py", "judge/__init__.py"} <= files
    assert not files & {"outputs/plots.py", "outputs/figures.py", "model/report.py", "commands.py", "cli.py"}
    assert not [name for name in files if name.startswith("confine/")]


def test_the_judge_stays_on_one_thread_after_computing_expectations() -> None:
    """Resizing torch's pool back up makes every later small op of the judge about thirty times slower."""
    with single_threaded():
        pass
    assert torch.get_num_threads() == 1


class _Forged:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("a forged cache ran code",))


def test_a_cache_file_round_trips_and_a_foreign_one_is_recomputed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Written and read in the frame format: strides, dtypes and more tensors than a frame may hold come back;
    a file in any other format (a pickle, say) is unreadable, so recomputed, and runs nothing."""
    data: dict[str, Any] = {
        "t": torch.arange(6.0).reshape(2, 3).t(),
        "calls": [{"x": torch.ones(2, dtype=torch.bfloat16)}],
        "many": [torch.tensor(i) for i in range(5000)],
    }
    _write(tmp_path / "good.pt", data)
    loaded = load_cache_file(tmp_path / "good.pt")
    assert loaded["t"].stride() == data["t"].stride() and torch.equal(loaded["t"], data["t"])
    assert loaded["calls"][0]["x"].dtype == torch.bfloat16 and loaded["many"][4999].item() == 4999
    torch.save({"x": _Forged()}, tmp_path / "forged.pt")
    with pytest.raises(ProtocolError, match="not a frame"):
        load_cache_file(tmp_path / "forged.pt")
    assert "ran code" not in capsys.readouterr().out
    monkeypatch.setenv("PAPERLEET_CACHE", str(tmp_path / "cache"))
    problem = Problem(PROBLEM)
    expectations = Expectations(problem, problem.grading_seeds[0])
    expectations.warm()
    (main,) = (tmp_path / "cache" / PROBLEM).glob("*.pt")
    torch.save({"cases": {"x": [_Forged()]}}, main)
    assert Expectations(problem, problem.grading_seeds[0])._cases == {}  # refused, so computed again
    assert "ran code" not in capsys.readouterr().out


def test_warnings_of_the_reference_and_the_misreadings_never_reach_the_terminal(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A warning quotes the line that raised it: code of the hidden reference, or of a known-wrong variant of it."""
    problem = Problem(PROBLEM)

    def warning(function: Any) -> Any:
        def warns(**kwargs: Any) -> Any:
            warnings.warn("REFERENCE-LINE leaked", UserWarning, stacklevel=1)
            return function(**kwargs)

        return warns

    monkeypatch.setitem(problem.__dict__, "reference", {k: warning(f) for k, f in problem.reference.items()})
    monkeypatch.setattr(Problem, "misconception_functions", lambda self, m: problem.reference)
    check = next(c for c in problem.spec.checks if c.cases)
    assert check.cases is not None
    expectations = Expectations(problem, problem.grading_seeds[0], use_cache=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expectations.observation("reference", check.cases, 0)
        expectations.misconception_observations(check.cases, 0)
        expectations.series()
        expectations.misconception_series()
    assert [str(w.message) for w in caught] == []
    out, err = capfd.readouterr()
    assert "REFERENCE-LINE" not in out + err


def test_a_first_run_says_each_stage_it_computes_once_and_a_cached_run_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAPERLEET_CACHE", str(tmp_path))
    problem = Problem("grpo_advantages")
    said: list[str] = []
    first = Expectations(problem, problem.grading_seeds[0], say=said.append)
    first.warm()
    assert len(said) == 2 and "computing the reference's answers" in said[0] and "ready in" in said[1]
    check = next(c for c in problem.spec.checks if c.cases)
    assert check.cases is not None
    for index in range(len(first.cases(check.cases))):
        first.misconception_observations(check.cases, index)
    other = next(c for c in problem.spec.checks if c.cases and c.cases != check.cases)
    assert other.cases is not None
    first.misconception_observations(other.cases, 0)
    assert len(said) == 3 and "misreadings" in said[2], "one line for every case set, not one per set"
    first.persist()
    said.clear()
    again = Expectations(problem, problem.grading_seeds[0], say=said.append)
    again.warm()
    again.misconception_observations(check.cases, 0)
    assert said == [], "a run that reads the cache says nothing"


def test_observations_are_identical_only_when_every_byte_and_field_agrees() -> None:
    """`identical` decides which misreadings' observations are compared with a learner's answer once: it must never
    join two that a comparison could tell apart."""
    x = torch.tensor([1.0, float("nan"), 0.0], dtype=torch.float64)
    base = {"output": x, "grads": {"x": x * 2}, "requires_grad": False, "scale": 0.5}
    assert identical(base, {**base, "output": x.clone(), "grads": {"x": x * 2}})  # NaN matches itself
    assert not identical(base, {**base, "output": torch.tensor([1.0, float("nan"), -0.0], dtype=torch.float64)})
    assert not identical(base, {**base, "output": x.to(torch.float32)})
    assert not identical(base, {**base, "output": x.reshape(3, 1)})
    assert not identical(base, {**base, "output": torch.stack([x, x], 1)[:, 0]})  # same values, other strides
    assert not identical(base, {**base, "requires_grad": True})
    assert not identical(base, {**base, "scale": -0.5})
    assert not identical(base, {**base, "extra": None})
    assert not identical({"output": [x, 1]}, {"output": (x, 1)})


def test_misreadings_that_answer_alike_share_one_observation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAPERLEET_CACHE", str(tmp_path))
    problem = Problem(PROBLEM)
    cases = next(c.cases for c in problem.spec.checks if c.cases)
    expectations = Expectations(problem, problem.grading_seeds[0])
    shared = expectations.misconception_observations(cases, 0)
    for mid, observation in shared.items():
        for other, theirs in shared.items():
            assert (observation is theirs) == identical(observation, theirs), (mid, other)
    assert len({id(o) for o in shared.values()}) < len(shared)  # most misreadings answer case 0 as the reference
