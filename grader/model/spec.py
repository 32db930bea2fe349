"""Problem specs: strict pydantic models loaded from `problems/<id>/problem.toml`."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

TierId = Literal["T0", "T1", "T2", "T3"]
TIERS: tuple[TierId, ...] = get_args(TierId)  # in the order every table, summary and page lists them
CheckKind = Literal["signature", "differential", "experiment"]
Expected = Literal["reference", "oracle"]  # what a differential check's cases are compared with
Visibility = Literal["visible", "hidden", "after_due_date", "after_published"]
ClauseKind = Literal["formula", "convention", "precision", "validation", "return_type", "phenomenon"]
# clauses whose charge must hold by construction, with follow-through off, not only by a misreading's diagnosis
CONSTRUCTED_KINDS: frozenset[ClauseKind] = frozenset({"convention", "precision", "validation", "return_type"})
DeclaredScores = Literal["enforced", "reported"]
Aspect = Literal[
    "type",
    "shape",
    "dtype",
    "device",
    "values",
    "values_exact",
    "finite",
    "requires_grad",
    "backward",
    "connected",
    "grads",
    "grad_flow",
    "inputs_unchanged",
    "raises",
    "responds",
]
# How a check compares float64 results: "strict" at the float64 tolerance (it owns the statement's precision
# clause), "float32" widened to what the same arithmetic in float32 would give (every other check).
Precision = Literal["strict", "float32"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(Strict):
    """Per-submission limits: these defaults hold wherever a problem's `[limits]` table is silent."""

    import_timeout_s: float = Field(30.0, gt=0)
    call_timeout_s: float = Field(10.0, gt=0)
    experiment_timeout_s: float = Field(30.0, gt=0)
    submission_budget_s: float = Field(120.0, gt=0)
    cpu_time_s: int = Field(120, gt=0)
    memory_mb: int = Field(4096, gt=256)
    output_kb: int = Field(64, ge=1)
    file_size_mb: int = Field(16, ge=1)
    max_processes: int = Field(64, ge=4)
    result_mb: int = Field(64, ge=1)


class Tolerance(Strict):
    rtol: float = Field(ge=0)
    atol: float = Field(ge=0)


class FunctionSpec(Strict):
    name: str
    params: list[str]
    signature: str
    # for messages: the parameter holding the validity mask (a failing padded element is said to be padding),
    # and the one holding a group size (a failing element is shown with its whole group)
    mask_param: str | None = None
    group_param: str | None = None


class TierSpec(Strict):
    id: TierId
    title: str
    points: float = Field(gt=0)


class Clause(Strict):
    """One clause of the statement; its weight is the points of the checks that name it."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    kind: ClauseKind
    text: str = Field(min_length=1, pattern=r"^[^\n]*$")


class CheckBase(Strict):
    """What every check declares, whatever its kind."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    tier: TierId
    kind: CheckKind
    title: str
    points: float = Field(gt=0)
    clause: str  # the id of the statement's clause this check owns a share of
    visibility: Visibility = "visible"
    # false: its cases come only from the hidden grading seeds, so no learner-side copy (the learner pack) runs it
    public: bool = True


# A check of one kind answers for another kind's fields with these constants (never read from a file: a kind's
# model forbids the others' keys), so code that walks every check asks any of them for its cases or series.
class _DrawsNoCases:
    cases: ClassVar[str | None] = None
    expected: ClassVar[Expected] = "reference"
    compare: ClassVar[tuple[Aspect, ...]] = ()
    precision: ClassVar[Precision] = "strict"


class _ComparesNoSeries:
    series: ClassVar[tuple[str, ...]] = ()
    exact: ClassVar[bool] = False
    atol: ClassVar[float] = 0.0
    rtol: ClassVar[float] = 0.0


class SignatureCheck(CheckBase, _DrawsNoCases, _ComparesNoSeries):
    """The contract's functions exist with its parameter names."""

    kind: Literal["signature"]


class DifferentialCheck(CheckBase, _ComparesNoSeries):
    """Calls built by the case generator `cases` (the check's id unless named), compared on `compare`."""

    kind: Literal["differential"]
    cases: str
    expected: Expected = "reference"
    compare: list[Aspect] = Field(min_length=1)
    precision: Precision = "float32"

    @model_validator(mode="before")
    @classmethod
    def _cases_default_to_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and "cases" not in data and "id" in data:
            return {**data, "cases": data["id"]}
        return data


class ExperimentCheck(CheckBase, _DrawsNoCases):
    """Series of the T3 toy compared bit for bit (`exact`) or within `atol` + `rtol` * |expected|."""

    kind: Literal["experiment"]
    series: list[str] = Field(min_length=1)
    exact: bool = False
    atol: float = Field(0.0, ge=0)
    rtol: float = Field(0.0, ge=0)


CheckSpec = Annotated[SignatureCheck | DifferentialCheck | ExperimentCheck, Field(discriminator="kind")]
CHECK_KINDS: dict[CheckKind, type[CheckBase]] = {
    "signature": SignatureCheck,
    "differential": DifferentialCheck,
    "experiment": ExperimentCheck,
}


class PlotLine(Strict):
    y: str
    label: str
    style: str = "-"


class PlotSpec(Strict):
    file: str = Field(pattern=r"^[a-z0-9_]+\.png$")
    title: str
    x: str
    xlabel: str = ""
    ylabel: str = ""
    lines: list[PlotLine]
    integer_x: bool = False  # x counts something (batches, updates): ticks on whole numbers only
    # the x axis spans where the reference's curves of these series differ from one another, and as much again on
    # each side, rather than the whole sweep; nothing is zoomed where they never differ
    zoom_to_differences: list[str] = []

    @model_validator(mode="after")
    def _zoom_names_lines(self) -> PlotSpec:
        drawn = {line.y for line in self.lines}
        unknown = [name for name in self.zoom_to_differences if name not in drawn]
        if unknown:
            raise ValueError(f"plot {self.file}: zoom_to_differences names {unknown}, which are not its lines' series")
        if len(self.zoom_to_differences) == 1:
            raise ValueError(f"plot {self.file}: zoom_to_differences needs two series or more, to compare")
        return self


Difficulty = Literal["introductory", "intermediate", "advanced"]
DIFFICULTIES: tuple[Difficulty, ...] = get_args(Difficulty)  # easiest first: the catalog's order breaks ties by it


class Paper(Strict):
    """A paper the exercise implements or contrasts, as a learner would look it up."""

    title: str = Field(min_length=1)
    authors: str = Field(min_length=1)  # as the paper lists them, or the first author and "et al."
    year: int = Field(ge=1950, le=2100)
    equations: str = ""  # the sections and equations the exercise exercises; empty for a paper only contrasted
    url: str = ""


class Catalog(Strict):
    """What the catalog lists of a problem: its papers, topics, difficulty, prerequisites and expected time."""

    summary: str = Field(min_length=1, max_length=300)  # one sentence: what the learner implements
    papers: list[Paper] = Field(min_length=1)
    tags: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9 -]*$")]] = Field(min_length=1)
    difficulty: Difficulty
    builds_on: list[str] = []  # ids of exercises whose ideas this one assumes; checked against the catalog
    minutes: int = Field(gt=0, le=600)  # the time a learner who knows PyTorch should plan for

    @model_validator(mode="after")
    def _distinct(self) -> Catalog:
        if len(set(self.tags)) != len(self.tags):
            raise ValueError("tags must be distinct")
        if len(set(self.builds_on)) != len(self.builds_on):
            raise ValueError("builds_on must name each exercise once")
        return self


# ---------------------------------------------------------------- presets: what most problems write alike, named once

# `tiers = "standard"`: the four tiers of the README's table, with their usual titles and points
TIER_PRESETS: dict[str, tuple[tuple[TierId, str, float], ...]] = {
    "standard": (
        ("T0", "Contracts", 10),
        ("T1", "Scalar-loop oracle", 30),
        ("T2", "Edge cases", 40),
        ("T3", "Toy experiment", 20),
    ),
}
# `tolerances = "standard"`: float32 and float64 results at the tolerances a vectorized reference meets against a
# scalar loop in the same precision
TOLERANCE_PRESETS: dict[str, dict[str, dict[str, float]]] = {
    "standard": {"float32": {"rtol": 1e-4, "atol": 1e-6}, "float64": {"rtol": 1e-9, "atol": 1e-12}},
}


class CheckDefaults(Strict):
    """`[check_defaults.<tier>]`: keys every check of the tier takes unless it sets them (a key a check's kind does
    not take is left out of that check); None is a key left unset."""

    kind: CheckKind | None = None
    visibility: Visibility | None = None
    public: bool | None = None
    expected: Expected | None = None
    compare: str | list[Aspect] | None = None  # a list, or the name of a `[compare_sets]` entry
    precision: Precision | None = None
    exact: bool | None = None
    atol: float | None = Field(None, ge=0)
    rtol: float | None = Field(None, ge=0)


def _preset(value: Any, presets: Mapping[str, Any], key: str) -> Any:
    """A preset's content for a string value, the value itself otherwise."""
    if not isinstance(value, str):
        return value
    if value not in presets:
        raise ValueError(f"`{key}` names no preset {value!r}; the presets are {', '.join(presets)}")
    return presets[value]


def _expand_check(raw: Any, index: int, defaults: Mapping[str, Any], sets: Mapping[str, Any], clauses: Any) -> Any:
    """One raw check with its tier's defaults, its compare set and its clause and title defaults filled in."""
    if not isinstance(raw, dict):
        return raw
    check = dict(raw)
    tier_defaults = defaults.get(str(check.get("tier")), {})
    if "kind" not in check and isinstance(tier_defaults, dict) and "kind" in tier_defaults:
        check["kind"] = tier_defaults["kind"]
    kind_fields = CHECK_KINDS[check["kind"]].model_fields if check.get("kind") in CHECK_KINDS else {}
    for key, value in tier_defaults.items() if isinstance(tier_defaults, dict) else ():
        if key not in check and key in kind_fields:
            check[key] = value
    name = check.get("id", f"#{index + 1}")
    if isinstance(check.get("compare"), str):
        if check["compare"] not in sets:
            known = ", ".join(sets) or "none"
            raise ValueError(f"check `{name}`: compare names no `[compare_sets]` entry {check['compare']!r} ({known})")
        check["compare"] = sets[check["compare"]]
    texts = {c.get("id"): c.get("text") for c in clauses if isinstance(c, dict)} if isinstance(clauses, list) else {}
    if "clause" not in check and check.get("id") in texts:
        check["clause"] = check["id"]
    if "title" not in check and isinstance(texts.get(check.get("clause")), str):
        check["title"] = texts[check["clause"]]
    return check


class ProblemSpec(Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str = Field(min_length=1)
    source: str
    public_seed: int
    catalog: Catalog
    limits: Limits = Limits()
    tolerances: dict[Literal["float16", "bfloat16", "float32", "float64"], Tolerance]
    functions: list[FunctionSpec]
    tiers: list[TierSpec]
    clauses: list[Clause] = Field(min_length=1)
    checks: list[CheckSpec]
    # named lists of aspects, for checks that compare alike: `compare = "<name>"` in a check or its tier's defaults
    compare_sets: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")], list[Aspect]] = {}
    check_defaults: dict[TierId, CheckDefaults] = {}
    plots: list[PlotSpec] = []
    # a failing case explained by a misreading charged in its owner checks earns its points in the others
    follow_through: bool = True
    # "enforced": `validate` fails when a known-wrong solution or a port scores more than 2 points off the score its
    # broken clauses declare; "reported": it prints the table and warns
    declared_scores: DeclaredScores = "reported"

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        """Presets, compare sets and tier defaults written out, so every model below sees a check whole."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "tiers" in data:
            tiers = _preset(data["tiers"], TIER_PRESETS, "tiers")
            data["tiers"] = (
                [{"id": t, "title": title, "points": points} for t, title, points in tiers]
                if isinstance(data["tiers"], str)
                else tiers
            )
        if "tolerances" in data:
            data["tolerances"] = _preset(data["tolerances"], TOLERANCE_PRESETS, "tolerances")
        sets = data.get("compare_sets", {})
        defaults = data.get("check_defaults", {})
        if isinstance(sets, dict) and isinstance(defaults, dict) and isinstance(data.get("checks"), list):
            clauses = data.get("clauses", [])
            data["checks"] = [
                _expand_check(raw, index, defaults, sets, clauses) for index, raw in enumerate(data["checks"])
            ]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ProblemSpec:
        ids = [c.id for c in self.checks]
        if len(ids) != len(set(ids)):
            raise ValueError("check ids must be unique")
        self._clauses_owned()
        for tier in self.tiers:
            total = sum(c.points for c in self.checks if c.tier == tier.id)
            if abs(total - tier.points) > 1e-9:
                raise ValueError(f"tier {tier.id} is worth {tier.points} but its checks sum to {total}")
        if self.id in self.catalog.builds_on:
            raise ValueError(f"catalog.builds_on names the problem itself, {self.id}")
        declared = {t.id for t in self.tiers}
        for check in self.checks:
            if check.tier not in declared:
                raise ValueError(f"check {check.id} names undeclared tier {check.tier}")
        return self

    def _clauses_owned(self) -> None:
        """Every clause declared once and owned by a check, every check's clause declared."""
        declared = [c.id for c in self.clauses]
        twice = sorted({c for c in declared if declared.count(c) > 1})
        if twice:
            raise ValueError(f"clause ids declared more than once: {', '.join(twice)}")
        for check in self.checks:
            if check.clause not in declared:
                raise ValueError(f"check {check.id} names undeclared clause {check.clause!r}")
        unowned = [c for c in declared if not any(check.clause == c for check in self.checks)]
        if unowned:
            raise ValueError(f"no check owns clause(s) {', '.join(unowned)}")

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tiers)

    def clause_checks(self, clause_id: str) -> list[str]:
        """The checks that own `clause_id`, in the spec's order."""
        return [c.id for c in self.checks if c.clause == clause_id]

    def clause_weight(self, clause_id: str) -> float:
        return sum(c.points for c in self.checks if c.clause == clause_id)

    def declared_score(self, breaks: Iterable[str]) -> float:
        """The score of a solution that breaks exactly these clauses: each loses its whole weight, once."""
        return self.max_score - sum(self.clause_weight(c) for c in set(breaks))

    def unknown_clauses(self, names: Iterable[str]) -> list[str]:
        declared = {c.id for c in self.clauses}
        return sorted(set(names) - declared)


class SpecError(Exception):
    """A problem spec is missing or invalid; the message says which file and which field."""


def load_spec(path: Path) -> ProblemSpec:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"no problem spec at {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    try:
        return ProblemSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{path}: " + "; ".join(_describe(error, data) for error in exc.errors())) from None


def _describe(error: Mapping[str, Any], data: dict[str, Any]) -> str:
    """One validation error in one line, a check named by its id and its fields by their names in the file."""
    loc, msg = error["loc"], error["msg"].removeprefix("Value error, ")
    if len(loc) < 2 or loc[0] != "checks" or not isinstance(loc[1], int):
        return f"`{'.'.join(map(str, loc))}`: {msg}" if loc else msg
    raw = data["checks"][loc[1]]
    check_id, kind = (raw.get("id"), raw.get("kind")) if isinstance(raw, dict) else (None, None)
    check = f"check `{check_id}`" if isinstance(check_id, str) else f"check #{loc[1] + 1}"
    field = ".".join(map(str, loc[3:] if loc[2:3] == (kind,) else loc[2:]))
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return f"{check}: `kind` must be one of {', '.join(CHECK_KINDS)}, not {kind!r}"
    if error["type"] == "extra_forbidden" and kind in CHECK_KINDS:
        return f"{check}: a check of kind {kind} has no `{field}`; it takes {', '.join(CHECK_KINDS[kind].model_fields)}"
    return f"{check}: `{field}`: {msg}" if field else f"{check}: {msg}"
