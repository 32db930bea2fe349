"""The known misreadings of a problem as `reference/<id>/misconceptions.toml` declares them, with their owner checks."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from grader.model.generic import CATALOGUE, GenericName
from grader.model.spec import SpecError


class Convention(BaseModel):
    """A real library's deliberate choice that a misreading reproduces: the learner followed that library, not the
    statement ("slime divides by sum max(1, n_i); this statement divides by max(1, sum n_i)")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    library: str = Field(min_length=2, max_length=60)
    does: str = Field(min_length=5, max_length=300)  # what the library does, a predicate: "divides by ..."
    statement: str = Field(min_length=5, max_length=300)  # what the statement asks instead, a predicate too

    def sentence(self) -> str:
        return f"{self.library} {self.does} on purpose; this statement {self.statement}."


# The parameters fitted for one combination: (misreading id, value) pairs, in the combination's order.
Fitted = tuple[tuple[str, float], ...]


class Parameter(BaseModel):
    """A number a misreading leaves open (ddof, eps, a floor, a bound), fitted from the learner's answers: the
    misreading with value v is its solution with `find` replaced by `replace` with v put for `{value}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=30)  # as the explanation names it
    find: str = Field(min_length=1)  # occurs exactly once in the misreading's solution
    replace: str = Field(pattern=r"\{value\}")
    values: list[float] = Field(min_length=2, max_length=12)  # the grid tried, most likely first

    def edit(self, text: str, value: float) -> str | None:
        """`text` (a solution holding this misreading) with the parameter set to `value`; None when `find` does
        not occur exactly once in it."""
        if text.count(self.find) != 1:
            return None
        return text.replace(self.find, self.replace.replace("{value}", repr(float(value))))

    def sentence(self, value: float) -> str:
        return f"It behaves as if {self.name} = {value:g}."


class DeclaredMisconception(BaseModel):
    """One known misreading as `misconceptions.toml` declares it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    # known-wrong, declared by wrong/<stem>.toml; a generic misreading may have none: the reference with its
    # transform applied is its solution, and `breaks` names the clauses that own it
    solution: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_]+\.py$")
    breaks: list[str] = []
    # a generic misreading's stock explanation stands when the problem does not specialise it
    explanation: str = Field(default="", max_length=600)
    convention: Convention | None = None  # set when the misreading is a library's deliberate convention
    # the generic misreading (`model.generic`) this one is: its transform stands in for the solution's edits
    # wherever it is held together with others
    generic: GenericName | None = None
    # a number the misreading leaves open, fitted from the learner's answers where held together with others
    parameter: Parameter | None = None

    @model_validator(mode="after")
    def _explained(self) -> DeclaredMisconception:
        if not self.explanation and self.generic is not None:
            object.__setattr__(self, "explanation", CATALOGUE[self.generic].explanation)
        if len(self.explanation) < 10:
            raise ValueError(f"{self.id}: an explanation of at least 10 characters, or a generic misreading's")
        if self.solution is None and (self.generic is None or not self.breaks):
            raise ValueError(f"{self.id}: a solution, or a generic misreading with the clauses it breaks")
        if self.parameter is not None and self.solution is None:
            raise ValueError(f"{self.id}: a fitted parameter edits a solution, and it names none")
        if self.solution is not None and self.breaks:
            raise ValueError(f"{self.id}: its solution's declaration names the clauses it breaks, not `breaks`")
        return self


class Misconception(DeclaredMisconception):
    """One known misreading of a problem's statement, with the checks that own it."""

    owners: list[str] = Field(min_length=1)


class MisconceptionFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    misconceptions: list[DeclaredMisconception] = []


def load_misconceptions(
    path: Path,
    owners_of: Callable[[Path], list[str]],
    wrong_dir: Path,
    checks_of: Callable[[list[str]], list[str]] | None = None,
) -> list[Misconception]:
    """The declared misreadings; none when the file is absent. Errors name the file and the field.

    `owners_of` gives the owner checks of a known-wrong declaration (the checks of the clauses it breaks),
    `checks_of` those of the clauses a generic misreading without a solution declares it breaks."""
    if not path.is_file():
        return []
    try:
        declared = MisconceptionFile.model_validate(tomllib.loads(path.read_text())).misconceptions
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise SpecError(f"{path}: {exc}") from None
    seen: set[str] = set()
    loaded = []
    for item in declared:
        if item.id in seen:
            raise SpecError(f"{path}: misconception id {item.id!r} is declared twice")
        seen.add(item.id)
        if item.solution is None:
            if checks_of is None:
                raise SpecError(f"{path}: misconception {item.id!r} names no solution")
            loaded.append(Misconception(**item.model_dump(), owners=checks_of(item.breaks)))
            continue
        declaration = (wrong_dir / item.solution).with_suffix(".toml")
        if not declaration.is_file():
            raise SpecError(f"{path}: misconception {item.id!r} names {item.solution}, not declared in {wrong_dir}")
        loaded.append(Misconception(**item.model_dump(), owners=owners_of(declaration)))
    return loaded
