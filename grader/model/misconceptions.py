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
    """One known misreading as `misconceptions.toml` declares it: with the known-wrong file that embodies it."""

    solution: str = Field(pattern=r"^[A-Za-z0-9_]+\.py$")  # known-wrong, declared by wrong/<stem>.toml


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
) -> list[Misconception]:
    """The declared misreadings: those of `misconceptions.toml` (when present) in its order, then those declared in
    the known-wrong declarations themselves (`in_declarations`, by declaration path) by rank and file name. A
    misreading declared twice, by id or by the file that embodies it, is an error naming both places.

    `owners_of` gives the owner checks of a known-wrong declaration (the checks of the clauses it breaks)."""
    declared: list[tuple[DeclaredMisconception, Path]] = []
    if path.is_file():
        try:
            listed = MisconceptionFile.model_validate(tomllib.loads(path.read_text())).misconceptions
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise SpecError(f"{path}: {exc}") from None
        declared += [(item, path) for item in listed]
    inline = sorted((in_declarations or {}).items(), key=lambda pair: (pair[1].rank, pair[0].name))
    declared += [
        (DeclaredMisconception(**item.model_dump(), solution=f"{where.stem}.py"), where) for where, item in inline
    ]
    ids: dict[str, Path] = {}
    solutions: dict[str, Path] = {}
    loaded = []
    for item, where in declared:
        for key, seen in ((item.id, ids), (item.solution, solutions)):
            if key in seen:
                also = "again" if seen[key] == where else f"and in {seen[key]}"
                raise SpecError(f"{where}: misreading {key!r} is declared twice ({also}); declare it once")
            seen[key] = where
        declaration = (wrong_dir / item.solution).with_suffix(".toml")
        if not declaration.is_file():
            raise SpecError(f"{where}: misconception {item.id!r} names {item.solution}, not declared in {wrong_dir}")
        loaded.append(Misconception(**item.model_dump(), owners=owners_of(declaration)))
    return loaded
