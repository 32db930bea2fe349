"""Convention ports: each file under reference/<id>/ports/ reproduces one public library's choices at a pinned
commit, declares them beside it in a TOML file, and grades no lower than the score it had when it was written."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import problem_named

from grader import engine
from grader.model.known_wrong import load_declaration
from grader.model.problem import list_problems, load_module

LIBRARIES = frozenset({"slime", "verl", "OpenRLHF", "TRL", "Megatron-Core", "transformers", "NeMo-RL"})
FIELDS = frozenset(
    {"library", "repository", "commit", "file", "lines", "reproduces", "departures", "breaks", "score_before"}
)
COMMIT = re.compile(r"[0-9a-f]{40}")
MIN_PORTS = 3  # conventions of at least three libraries per problem
NOISE = 0.5  # points a port may lose to the rounding of a noisy toy before the guard calls it a regression


def _ports() -> list[tuple[str, Path]]:
    return [
        (problem_id, path)
        for problem_id in list_problems()
        for path in sorted((problem_named(problem_id).reference_dir / "ports").glob("*.py"))
    ]


PORTS = _ports()
PROBLEMS_WITH_PORTS = sorted({problem_id for problem_id, _ in PORTS})


def _declaration(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.with_suffix(".toml").read_text())


@pytest.mark.parametrize("problem_id", list_problems())
def test_every_problem_has_ports_of_several_libraries(problem_id: str) -> None:
    libraries = {_declaration(path)["library"] for p, path in PORTS if p == problem_id}
    assert len([p for p, _ in PORTS if p == problem_id]) >= MIN_PORTS and len(libraries) >= 2, libraries


@pytest.mark.parametrize(("problem_id", "path"), PORTS, ids=[f"{p}:{f.stem}" for p, f in PORTS])
def test_a_port_declares_its_library_commit_and_departures(problem_id: str, path: Path) -> None:
    declared = _declaration(path)
    assert set(declared) == FIELDS, sorted(set(declared) ^ FIELDS)
    assert declared["library"] in LIBRARIES
    assert COMMIT.fullmatch(declared["commit"]), declared["commit"]
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", declared["repository"])
    assert declared["lines"].strip()  # line numbers, or the functions where the file's lines are not known
    assert declared["reproduces"].strip() and all(d.strip() for d in declared["departures"])
    assert declared["breaks"] == [] or all(isinstance(b, str) for b in declared["breaks"])
    assert 0.0 <= declared["score_before"] <= 100.0


@pytest.mark.parametrize(("problem_id", "path"), PORTS, ids=[f"{p}:{f.stem}" for p, f in PORTS])
def test_a_port_loads_and_defines_the_exercise_functions(problem_id: str, path: Path) -> None:
    """It names its commit where a reader looks first, and a learner's grader would find every function."""
    module = load_module(f"paperleet_port_{problem_id}_{path.stem}", path)
    assert _declaration(path)["commit"] in (module.__doc__ or "")
    for function in problem_named(problem_id).spec.functions:
        found = getattr(module, function.name)
        assert list(inspect.signature(found).parameters) == function.params


@pytest.mark.e2e
@pytest.mark.parametrize("problem_id", PROBLEMS_WITH_PORTS)
def test_no_port_grades_lower_than_when_it_was_written(problem_id: str) -> None:
    problem = problem_named(problem_id)
    files = [path for p, path in PORTS if p == problem_id]
    reports = engine.grade_many(problem, files, problem.grading_seeds[0], problem.spec.limits, jobs=2)
    lower = {
        path.stem: (report.score, _declaration(path)["score_before"])
        for path, report in zip(files, reports, strict=True)
        if report.score < _declaration(path)["score_before"] - NOISE
    }
    assert not lower, lower


# The problems whose ports diagnosis is held to: every problem.
DIAGNOSED = (
    "glm5_offpolicy",
    "ppo_clip_loss",
    "grpo_advantages",
    "routed_gates",
    "behavior_weights",
    "score_centering",
    "kl_estimators",
    "gspo_sequence_ratio",
)
# Declared departures the diagnosis does not name, by port, each with why: no declared misreading, alone or held
# together with two others, answers as the port does there. Validation clauses are left out throughout: a port that
# validates nothing skips every clause at once, and a declared misreading skips one.
UNNAMED = {
    # no misreading clamps the bounds as NeMo-RL does, and its NaN padding is not the multiplied-away one
    "behavior_weights:nemo_rl": {
        "defaults_each_bound",
        "extreme_ratios",
        "mode_defaults",
        "padding_ignored",
        "padding_zeroed",
    },
    # OpenRLHF's empty mask is NaN over finite padding and zero over NaN padding, so the unguarded denominator (NaN
    # on every empty mask) is contradicted by the cases it passes
    "glm5_offpolicy:openrlhf": {"empty_mask"},
    # slime's empty mask fails only over NaN padding, which the padding misreading it is charged with explains; its
    # empty response's NaN advantage fails in a loss whose value is the PPO surrogate at ratio 1: no combination found
    # answers so
    "glm5_offpolicy:slime": {"empty_mask", "empty_row_advantage"},
    # its float64-mask calls fail for the promoted dtype and, at once, for its survivors-only denominator or its
    # log-space bounds: no combination found answers so; its log-space bounds keep an exact endpoint only where the
    # logarithms round so, which neither the open nor the closed interval does on every endpoint
    "glm5_offpolicy:verl": {"mask_dtypes", "strict_interval"},
    # OpenRLHF clamps log r to [-20, 20] before the mask multiplies: inf padding becomes finite and only NaN spreads,
    # which no padding misreading does; its empty mask gives a NaN loss and a NaN clipfrac (0/0 in both), where the
    # unguarded denominator's clipfrac stays 0
    "ppo_clip_loss:openrlhf": {"empty_mask", "padding_ignored"},
    # no misreading takes OpenRLHF's defaults or zeroes padding as it does
    "behavior_weights:openrlhf": {"defaults_each_bound", "mode_defaults", "padding_zeroed"},
    # slime's padding is not zeroed the declared way; its ICE-POP low follows the TIS one
    "behavior_weights:slime": {"defaults_each_bound", "padding_zeroed"},
    # no misreading lowers TIS's clip as verl does
    "score_centering:verl": {"tis_lower_clip"},
    # NeMo-RL clamps log r to [-20, 20] before the mask multiplies: inf padding becomes finite and only NaN spreads,
    # which no padding misreading does
    "kl_estimators:nemo_rl": {"padding_ignored"},
    # verl clamps k3 alone (log r and value), while the declared clamp clamps every estimator's value; its padding
    # goes through the same k3 clamp as NeMo-RL's
    "kl_estimators:verl": {"padding_ignored", "unclamped"},
    # its float64-mask calls fail for its clipfrac or its broadcast token ratio at once, a pair the search misses
    "gspo_sequence_ratio:trl": {"mask_dtypes"},
    # verl's empty batch is 0 / 0 in a mean over non-empty responses, its token ratio's log clamped at 10, and its
    # padding and mask dtype fail in calls that its broadcast token ratio fails too: no combination found answers so
    "gspo_sequence_ratio:verl": {"empty_mask", "log_space", "mask_dtypes", "padding_ignored"},
}
SEVERAL = [
    (problem_id, path)
    for problem_id, path in PORTS
    if problem_id in DIAGNOSED and len(_declaration(path)["departures"]) >= 2
]


@pytest.mark.e2e
@pytest.mark.parametrize("problem_id", DIAGNOSED)
def test_a_port_departing_in_several_places_is_diagnosed_with_each_departure(problem_id: str) -> None:
    """The misreadings named, alone or held together, break between them every clause the port declares broken
    (validation apart, and the listed gaps), and none breaks only clauses the port follows."""
    problem = problem_named(problem_id)
    files = [path for p, path in SEVERAL if p == problem_id]
    wrong_dir = problem.reference_dir / "wrong"
    breaks = {
        m.id: set(load_declaration((wrong_dir / m.solution).with_suffix(".toml")).breaks)
        if m.solution is not None
        else set(m.breaks)
        for m in problem.misconceptions
    }
    validation = {c.id for c in problem.spec.clauses if c.kind == "validation"}
    reports = engine.grade_many(problem, files, problem.grading_seeds[0], problem.spec.limits, jobs=2)
    wrong = {}
    for path, report in zip(files, reports, strict=True):
        declared = set(_declaration(path)["breaks"])
        named = [d.id for d in report.diagnosis]
        unnamed = declared - validation - set().union(*(breaks[m] for m in named))
        false = [m for m in named if not breaks[m] & declared]
        if unnamed != UNNAMED.get(f"{problem_id}:{path.stem}", set()) or false:
            wrong[path.stem] = {"named": named, "unnamed": sorted(unnamed), "not the port's": false}
    assert not wrong, wrong
