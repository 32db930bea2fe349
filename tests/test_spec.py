"""grader.model.spec: problem.toml loads into strict models; every malformed spec fails saying where."""

from __future__ import annotations

import copy
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, ROOT
from pydantic import ValidationError

from grader.model.problem import list_problems
from grader.model.spec import (
    CHECK_KINDS,
    TIER_PRESETS,
    TIERS,
    CheckKind,
    Limits,
    ProblemSpec,
    SpecError,
    load_spec,
)

SPEC_PATH = ROOT / "problems" / PROBLEM / "problem.toml"
# The last commit whose problem.toml files restated every default; the same specs must load from them.
RESTATED_DEFAULTS = "6d9ef8c"
DEFAULTS_STATED_ONCE = "0b28cd4"  # the commit that removed them


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
    target = {
        "top": data,
        "limits": data.setdefault("limits", {}),
        "check": data["checks"][0],
        "function": data["functions"][0],
    }
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


def test_omitted_cases_mean_the_check_id(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    _check(data, "exact_endpoints").pop("cases", None)
    _check(data, "oracle_loss")["cases"] = "random_loss"
    spec = ProblemSpec.model_validate(data)
    checks = {c.id: c for c in spec.checks}
    assert checks["exact_endpoints"].cases == "exact_endpoints"
    assert checks["oracle_loss"].cases == "random_loss"
    assert checks["signatures"].cases is None and checks["sweep_weights"].cases is None


def test_differential_check_needs_compare(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    del _check(data, "weights_contract")["compare"]
    text = _invalid(data)
    assert "differential.compare" in text and "Field required" in text


def test_experiment_check_needs_series(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    del _check(data, "sweep_weights")["series"]
    text = _invalid(data)
    assert "experiment.series" in text and "Field required" in text


def _with_line(tmp_path: Path, check_id: str, line: str) -> Path:
    """The real spec with `line` added to the check `check_id`, as a problem author would write it."""
    text = SPEC_PATH.read_text()
    anchor = f'[[checks]]\nid = "{check_id}"\n'  # a clause may share the check's id
    assert text.count(anchor) == 1
    path = tmp_path / "problem.toml"
    path.write_text(text.replace(anchor, anchor + line + "\n"))
    return path


@pytest.mark.parametrize(
    ("check_id", "kind", "line"),
    [
        ("signatures", "signature", 'compare = ["type"]'),
        ("weights_contract", "differential", 'series = ["sweep"]'),
        ("weights_contract", "differential", "atol = 1e-6"),
        ("sweep_weights", "experiment", 'cases = "contract_weights"'),
        ("sweep_weights", "experiment", 'expected = "oracle"'),
    ],
)
def test_a_field_of_another_kind_is_rejected(tmp_path: Path, check_id: str, kind: CheckKind, line: str) -> None:
    path = _with_line(tmp_path, check_id, line)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    field, takes = line.split(" = ")[0], ", ".join(CHECK_KINDS[kind].model_fields)
    said = f"check `{check_id}`: a check of kind {kind} has no `{field}`; it takes {takes}"
    assert str(info.value) == f"{path}: {said}"


def test_an_unknown_kind_is_one_line_naming_the_check(tmp_path: Path) -> None:
    path = tmp_path / "problem.toml"
    path.write_text(SPEC_PATH.read_text().replace('kind = "signature"', 'kind = "vibes"', 1))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}: check `signatures`: `kind` must be one of signature, differential, experiment, not 'vibes'"
    )


def test_a_missing_limits_table_means_the_default_limits(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    data.pop("limits", None)
    assert ProblemSpec.model_validate(data).limits == Limits()
    data["limits"] = {"call_timeout_s": 2.5}
    assert ProblemSpec.model_validate(data).limits == Limits(call_timeout_s=2.5)


def _spec_at(commit: str, relative: str) -> dict[str, Any] | None:
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{relative}"], capture_output=True, text=True)
    if shown.returncode != 0:
        return None
    # those versions predate clauses: one clause owns every check, the same in both
    data = tomllib.loads(shown.stdout)
    data["clauses"] = [{"id": "statement", "kind": "formula", "text": "the whole statement"}]
    for check in data["checks"]:
        check["clause"] = "statement"
    # and the `[catalog]` table: each gets today's, so that the rest is what is compared
    data.setdefault("catalog", tomllib.loads((ROOT / relative).read_text())["catalog"])
    return ProblemSpec.model_validate(data).model_dump()


@pytest.mark.e2e
@pytest.mark.parametrize("problem_id", list_problems())
def test_problem_loads_as_when_it_restated_every_default(problem_id: str) -> None:
    """The commit that stopped restating defaults changed no problem: both versions load as the same spec (later
    commits change the problems themselves, so the comparison is between those two fixed versions)."""
    relative = f"problems/{problem_id}/problem.toml"
    before = _spec_at(RESTATED_DEFAULTS, relative)
    after = _spec_at(DEFAULTS_STATED_ONCE, relative)
    if before is None or after is None:
        pytest.skip(f"{RESTATED_DEFAULTS} or {DEFAULTS_STATED_ONCE} is not in this checkout's history")
    assert after == before


@pytest.mark.parametrize("problem_id", list_problems())
def test_problem_toml_states_no_default(problem_id: str) -> None:
    data = tomllib.loads((ROOT / "problems" / problem_id / "problem.toml").read_text())
    restated = [f"limits.{k}" for k, v in data.get("limits", {}).items() if Limits.model_fields[k].default == v]
    for check in data["checks"]:
        kind = check.get("kind") or data["check_defaults"][check["tier"]]["kind"]
        fields = CHECK_KINDS[kind].model_fields
        restated += [f"{check['id']}.{k}" for k, v in check.items() if k != "kind" and fields[k].default == v]
        restated += [f"{check['id']}.cases"] if check.get("cases") == check["id"] else []
    assert not restated


def test_the_spec_doc_states_every_default() -> None:
    doc = (ROOT / "docs" / "problem-toml.md").read_text()
    missing = [
        f"{name} = {field.default!r}"
        for name, field in Limits.model_fields.items()
        if f"| `{name}` | `{field.default!r}` |" not in doc
    ]
    missing += [
        f"{kind}.{name}" for kind, model in CHECK_KINDS.items() for name in model.model_fields if f"`{name}`" not in doc
    ]
    assert not missing


def test_the_tier_list_is_written_once() -> None:
    assert TIERS == ("T0", "T1", "T2", "T3")
    spelled = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "grader").rglob("*.py"))
        if re.search(r"""["']T0["'],\s*["']T1["']""", path.read_text())
    ]
    assert spelled == ["grader/model/spec.py"]


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
    path.write_text(SPEC_PATH.read_text().replace("public_seed = ", "public_seeed = ", 1))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}: ") and "public_seeed" in str(info.value)
    assert "\n" not in str(info.value)


def test_load_spec_reports_bad_toml(tmp_path: Path) -> None:
    path = tmp_path / "problem.toml"
    path.write_text('id = "x"\ntitle = \n')
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(path)


def test_load_spec_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no problem spec at"):
        load_spec(tmp_path / "problem.toml")


# ---------------------------------------------------------------- presets, compare sets, tier defaults


def _written_out(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` with every check's compare, kind and title written out in full, and no presets."""
    return ProblemSpec.model_validate(raw).model_dump(exclude={"compare_sets", "check_defaults"})


def test_compare_sets_tier_defaults_and_presets_load_as_the_lists_they_name(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    data["tiers"] = "standard"
    data["compare_sets"] = {"values": ["type", "shape", "values"]}
    data["check_defaults"] = {"T1": {"kind": "differential", "expected": "oracle", "public": False}}
    changed = 0
    for check in data["checks"]:
        if check.get("compare") == ["type", "shape", "values"]:
            check["compare"] = "values"
            changed += 1
        if check["tier"] == "T1" and check.get("expected") == "oracle" and check.get("public") is False:
            del check["kind"], check["expected"], check["public"]
    assert changed
    spec = ProblemSpec.model_validate(data)
    assert [(t.id, t.points) for t in spec.tiers] == [(t, p) for t, _, p in TIER_PRESETS["standard"]]
    data["tiers"] = raw["tiers"]
    assert _written_out(data) == _written_out(raw)


def test_a_tier_default_a_kind_does_not_take_is_left_out_and_a_check_overrides_it(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    data["check_defaults"] = {"T0": {"expected": "oracle", "precision": "strict"}}
    spec = ProblemSpec.model_validate(data)
    t0 = [c for c in spec.checks if c.tier == "T0"]
    assert {c.kind for c in t0} >= {"signature", "differential"}
    assert all(c.expected == ("oracle" if c.kind == "differential" else "reference") for c in t0)
    data["checks"][[c["tier"] for c in data["checks"]].index("T0")]["visibility"] = "hidden"
    data["check_defaults"]["T0"]["visibility"] = "after_due_date"
    first = next(c for c in ProblemSpec.model_validate(data).checks if c.tier == "T0")
    assert first.visibility == "hidden"


def test_an_unknown_compare_set_or_preset_is_one_line_naming_it(raw: dict[str, Any], tmp_path: Path) -> None:
    data = copy.deepcopy(raw)
    differential = next(c for c in data["checks"] if c["kind"] == "differential")
    differential["compare"] = "shapes"
    assert f"check `{differential['id']}`: compare names no `[compare_sets]` entry 'shapes' (none)" in _invalid(data)
    data = copy.deepcopy(raw)
    data["tolerances"] = "loose"
    assert "`tolerances` names no preset 'loose'; the presets are standard" in _invalid(data)


def test_a_check_takes_its_clause_by_its_id_and_its_title_from_the_clause(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    clause = data["clauses"][0]
    owner = next(c for c in data["checks"] if c["clause"] == clause["id"])
    data["clauses"].append({"id": owner["id"], "kind": clause["kind"], "text": "A clause named as its check"})
    del owner["clause"], owner["title"]
    data["checks"].append({**copy.deepcopy(owner), "id": "second_owner", "clause": clause["id"], "points": 1})
    data["checks"][-1].pop("cases", None)
    data["tiers"] = [{**t, "points": t["points"] + (1 if t["id"] == owner["tier"] else 0)} for t in data["tiers"]]
    spec = ProblemSpec.model_validate(data)
    checks = {c.id: c for c in spec.checks}
    assert (checks[owner["id"]].clause, checks[owner["id"]].title) == (owner["id"], "A clause named as its check")
    assert checks["second_owner"].title == clause["text"]
