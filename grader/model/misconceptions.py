"""A problem's known misreadings, declared in its known-wrong files or `misconceptions.toml`, with their owners."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
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


class Misreading(BaseModel):
    """What a known misreading declares, wherever it is declared: a `[misconception]` table in the known-wrong
    declaration `wrong/<stem>.toml` that embodies it, or an entry of `misconceptions.toml` naming that file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    # a generic misreading's stock explanation stands when the problem does not specialise it
    explanation: str = Field(default="", max_length=600)
    convention: Convention | None = None  # set when the misreading is a library's deliberate convention
    # the generic misreading (`model.generic`) this one is: its transform stands in for the solution's edits
    # wherever it is held together with others
    generic: GenericName | None = None
    # a number the misreading leaves open, fitted from the learner's answers where held together with others
    parameter: Parameter | None = None

    # where two misreadings explain the same failing cases the narrower comes first: `misconceptions.toml`'s entries
    # in its order, then those of wrong/*.toml by rank and file name
    rank: int = 0

    @model_validator(mode="after")
    def _explained(self) -> Misreading:
        if not self.explanation and self.generic is not None:
            object.__setattr__(self, "explanation", CATALOGUE[self.generic].explanation)
        if len(self.explanation) < 10:
            raise ValueError(f"{self.id}: an explanation of at least 10 characters, or a generic misreading's")
        return self


class DeclaredMisconception(Misreading):
    """One known misreading as `misconceptions.toml` declares it: with the known-wrong file that embodies it, or, for
    a generic misreading, with the clauses it breaks."""

    # known-wrong, declared by wrong/<stem>.toml; a generic misreading may have none: the reference with its
    # transform applied is its solution, and `breaks` names the clauses that own it
    solution: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_]+\.py$")
    breaks: list[str] = []

    @model_validator(mode="after")
    def _embodied(self) -> DeclaredMisconception:
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
    in_declarations: Mapping[Path, Misreading] | None = None,
    checks_of: Callable[[list[str]], list[str]] | None = None,
) -> list[Misconception]:
    """The declared misreadings: those of `misconceptions.toml` (when present) in its order, then those declared in
    the known-wrong declarations themselves (`in_declarations`, by declaration path) by rank and file name, then the
    generic misreadings `misconceptions.toml` declares without a solution. A
    misreading declared twice, by id or by the file that embodies it, is an error naming both places.

    `owners_of` gives the owner checks of a known-wrong declaration (the checks of the clauses it breaks),
    `checks_of` those of the clauses a generic misreading without a solution declares it breaks."""
    declared: list[tuple[DeclaredMisconception, Path]] = []
    if path.is_file():
        try:
            listed = MisconceptionFile.model_validate(tomllib.loads(path.read_text())).misconceptions
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise SpecError(f"{path}: {exc}") from None
        declared += [(item, path) for item in listed if item.solution is not None]
    inline = sorted((in_declarations or {}).items(), key=lambda pair: (pair[1].rank, pair[0].name))
    declared += [
        (DeclaredMisconception(**item.model_dump(), solution=f"{where.stem}.py"), where) for where, item in inline
    ]
    if path.is_file():  # generic misreadings without a solution come last
        declared += [(item, path) for item in listed if item.solution is None]
    ids: dict[str, Path] = {}
    solutions: dict[str, Path] = {}
    loaded = []
    for item, where in declared:
        for key, seen in ((item.id, ids), (item.solution, solutions)):
            if key is None:
                continue
            if key in seen:
                also = "again" if seen[key] == where else f"and in {seen[key]}"
                raise SpecError(f"{where}: misreading {key!r} is declared twice ({also}); declare it once")
            seen[key] = where
        if item.solution is None:
            if checks_of is None:
                raise SpecError(f"{where}: misconception {item.id!r} names no solution")
            loaded.append(Misconception(**item.model_dump(), owners=checks_of(item.breaks)))
            continue
        declaration = (wrong_dir / item.solution).with_suffix(".toml")
        if not declaration.is_file():
            raise SpecError(f"{where}: misconception {item.id!r} names {item.solution}, not declared in {wrong_dir}")
        loaded.append(Misconception(**item.model_dump(), owners=owners_of(declaration)))
    return loaded
