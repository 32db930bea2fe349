"""Convention ports: solutions that reproduce one library's conventions, each declaring the clauses it breaks.

`reference/<id>/ports/<stem>.py` is a solution a learner porting that library would write, and `<stem>.toml`
beside it says where the convention comes from (repository, commit, file and lines), how it departs from the
statement, the clauses those departures break, and the score the file earned before the charges were per clause.
A port has no must-fail list: it is graded for its score, which must be the one its broken clauses declare.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.model.spec import SpecError

Library = Literal["slime", "verl", "OpenRLHF", "TRL", "Megatron-Core", "transformers", "NeMo-RL"]


class PortDeclaration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    library: Library
    repository: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    file: str = Field(min_length=1)
    # line ranges of `file`, then any other file or function the behaviour spans ("17-38, 41-55; loss.py 25-35")
    lines: str = Field(pattern=r"^\S", max_length=400)
    reproduces: str = Field(min_length=1)
    departures: list[str] = []
    breaks: list[str] = []  # clause ids; empty when the port follows every clause it is graded on
    score_before: float = Field(ge=0)


@dataclass(frozen=True)
class Port:
    """A port's solution file and its declaration."""

    path: Path
    declaration: PortDeclaration

    @property
    def breaks(self) -> frozenset[str]:
        return frozenset(self.declaration.breaks)


def load_ports(reference_dir: Path) -> list[Port]:
    """Every port of the problem, sorted by name; a declaration without its solution file is an error."""
    ports = []
    for path in sorted((reference_dir / "ports").glob("*.toml")):
        try:
            declaration = PortDeclaration.model_validate(tomllib.loads(path.read_text()))
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise SpecError(f"{path}: not a port declaration: {' '.join(str(exc).split())}") from None
        solution = path.with_suffix(".py")
        if not solution.is_file():
            raise SpecError(f"{path}: declares a port whose solution {solution.name} is missing")
        ports.append(Port(solution, declaration))
    return ports
