"""grader.model.spec: problem.toml loads into strict models; every malformed spec fails saying where."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, ROOT
from pydantic import ValidationError

from grader.model.spec import ProblemSpec, SpecError, load_spec

SPEC_PATH = ROOT / "problems" / PROBLEM / "problem.toml"


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return tomllib.loads(SPEC_PATH.read_text())


def _check(data: dict[str, Any], check_id: str) -> dict[str, Any]:
    return next(c for c in data["checks"] if c["id"] == check_id)


def _invalid(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        ProblemSpec.model_validate(data)
    return str(info.value)


def test_real_spec_loads() -> None:
    spec = load_spec(SPEC_PATH)
    assert spec.id == PROBLEM
    assert [t.id for t in spec.tiers] == ["T0", "T1", "T2", "T3"]
    assert spec.max_score == 100
    assert {f.name for f in spec.functions} == {"masked_is_weights", "offpolicy_loss"}


def test_every_tier_sums_its_checks() -> None:
    spec = load_spec(SPEC_PATH)
    for tier in spec.tiers:
        assert sum(c.points for c in spec.checks if c.tier == tier.id) == pytest.approx(tier.points)


@pytest.mark.parametrize("where", ["top", "limits", "check", "function"])
def test_unknown_key_is_rejected(raw: dict[str, Any], where: str) -> None:
    data = copy.deepcopy(raw)
    target = {"top": data, "limits": data["limits"], "check": data["checks"][0], "function": data["functions"][0]}
    target[where]["surprise"] = 1
    text = _invalid(data)
    assert "surprise" in text and "Extra inputs are not permitted" in text


def test_tier_points_must_match_its_checks(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    _check(data, "signatures")["points"] = 3
    assert "tier T0 is worth 10" in _invalid(data) and "sum to 11" in _invalid(data)


def test_unknown_check_kind_is_rejected(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    _check(data, "signatures")["kind"] = "vibes"
    assert "vibes" in _invalid(data)


def test_unknown_aspect_is_rejected(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    _check(data, "weights_contract")["compare"] = ["shape", "colour"]
    text = _invalid(data)
    assert "compare" in text and "colour" in text


def test_differential_check_needs_cases(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    del _check(data, "weights_contract")["cases"]
    assert "check weights_contract: a differential check needs `cases` and `compare`" in _invalid(data)


def test_experiment_check_needs_series(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    del _check(data, "sweep_weights")["series"]
    assert "check sweep_weights: an experiment check needs `series`" in _invalid(data)


def test_duplicate_check_ids_are_rejected(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    data["checks"].append(copy.deepcopy(_check(data, "signatures")))
    data["tiers"][0]["points"] += 2
    assert "unique" in _invalid(data)


def test_check_in_an_undeclared_tier_is_rejected(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    data["tiers"] = [t for t in data["tiers"] if t["id"] != "T3"]
    assert "names undeclared tier T3" in _invalid(data)


def test_spec_is_frozen() -> None:
    spec = load_spec(SPEC_PATH)
    with pytest.raises(ValidationError):
        spec.checks[0].points = 99  # type: ignore[misc]


def test_load_spec_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "problem.toml"
    path.write_text(SPEC_PATH.read_text().replace('public_seed = ', 'public_seeed = ', 1))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value) and "public_seeed" in str(info.value)


def test_load_spec_reports_bad_toml(tmp_path: Path) -> None:
    path = tmp_path / "problem.toml"
    path.write_text('id = "x"\ntitle = \n')
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(path)


def test_load_spec_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no problem spec at"):
        load_spec(tmp_path / "problem.toml")
