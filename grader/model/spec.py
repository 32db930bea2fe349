"""Problem specs: strict pydantic models loaded from `problems/<id>/problem.toml`."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

TierId = Literal["T0", "T1", "T2", "T3"]
Visibility = Literal["visible", "hidden", "after_due_date", "after_published"]
Aspect = Literal[
    "type", "shape", "dtype", "device", "values", "values_exact", "requires_grad",
    "backward", "connected", "grads", "inputs_unchanged", "raises",
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(Strict):
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


class CheckSpec(Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    tier: TierId
    kind: Literal["signature", "differential", "experiment"]
    title: str
    points: float = Field(gt=0)
    visibility: Visibility = "visible"
    # false: its cases come only from the hidden grading seeds, so no learner-side copy (the learner pack) runs it
    public: bool = True
    # differential
    cases: str | None = None
    expected: Literal["reference", "oracle"] = "reference"
    compare: list[Aspect] = []
    # experiment
    series: list[str] = []
    exact: bool = False
    atol: float = 0.0
    rtol: float = 0.0

    @model_validator(mode="after")
    def _kind_fields(self) -> CheckSpec:
        if self.kind == "differential" and (not self.cases or not self.compare):
            raise ValueError(f"check {self.id}: a differential check needs `cases` and `compare`")
        if self.kind == "experiment" and not self.series:
            raise ValueError(f"check {self.id}: an experiment check needs `series`")
        return self


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


class ProblemSpec(Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str
    source: str
    public_seed: int
    limits: Limits = Limits()
    tolerances: dict[Literal["float16", "bfloat16", "float32", "float64"], Tolerance]
    functions: list[FunctionSpec]
    tiers: list[TierSpec]
    checks: list[CheckSpec]
    plots: list[PlotSpec] = []
    # a failing case explained by a misreading charged in its owner checks earns its points in the others
    follow_through: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> ProblemSpec:
        ids = [c.id for c in self.checks]
        if len(ids) != len(set(ids)):
            raise ValueError("check ids must be unique")
        for tier in self.tiers:
            total = sum(c.points for c in self.checks if c.tier == tier.id)
            if abs(total - tier.points) > 1e-9:
                raise ValueError(f"tier {tier.id} is worth {tier.points} but its checks sum to {total}")
        declared = {t.id for t in self.tiers}
        for check in self.checks:
            if check.tier not in declared:
                raise ValueError(f"check {check.id} names undeclared tier {check.tier}")
        return self

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tiers)


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
        raise SpecError(f"{path}: {exc}") from None
