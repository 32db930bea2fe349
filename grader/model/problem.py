"""Locate a problem's files (spec, cases, experiment, reference, oracle, known-wrong) and load them."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

from grader.judge.cases import CaseGenerator
from grader.model.generic import CATALOGUE
from grader.model.known_wrong import KnownWrong, combined, declarations, load_declaration, materialize
from grader.model.misconceptions import Misconception, load_misconceptions
from grader.model.ports import Port, load_ports
from grader.model.spec import ProblemSpec, SpecError, Tolerance, load_spec
from grader.paths import PROJECT_ROOT


def load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SpecError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    spec.loader.exec_module(module)
    return module


class Problem:
    """Everything the trusted side knows about one exercise."""

    def __init__(self, problem_id: str, root: Path = PROJECT_ROOT) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", problem_id):
            raise SpecError(f"problem id {problem_id!r} must be lowercase letters, digits and underscores")
        self.id = problem_id
        self.root = root
        self.problem_dir = root / "problems" / problem_id
        self.reference_dir = root / "reference" / problem_id
        if not self.problem_dir.is_dir():
            known = ", ".join(list_problems(root)) or "none"
            raise SpecError(f"unknown problem {problem_id!r}; known problems: {known}")
        self.spec: ProblemSpec = load_spec(self.problem_dir / "problem.toml")
        if self.spec.id != problem_id:
            raise SpecError(f"{self.problem_dir}/problem.toml declares id {self.spec.id!r}")
        cases = self.cases_module
        missing = [c.id for c in self.spec.checks if c.cases and not callable(getattr(cases, c.cases, None))]
        if missing:
            raise SpecError(f"checks {missing} name case generators missing from {self.problem_dir / 'cases.py'}")

    @property
    def tolerances(self) -> dict[str, Tolerance]:
        """The spec's tolerances by dtype name, as comparisons look them up (the spec's keys are a closed set)."""
        return dict(self.spec.tolerances.items())

    @property
    def experiment_path(self) -> Path:
        return self.problem_dir / "experiment.py"

    @cached_property
    def cases_module(self) -> ModuleType:
        return load_module(f"paperleet_cases_{self.id}", self.problem_dir / "cases.py")

    def case_generator(self, name: str) -> CaseGenerator:
        return getattr(self.cases_module, name)  # type: ignore[no-any-return]

    @cached_property
    def experiment_module(self) -> ModuleType:
        return load_module(f"paperleet_experiment_{self.id}", self.experiment_path)

    def _functions(self, filename: str) -> dict[str, Callable[..., Any]]:
        module = load_module(f"paperleet_{filename}_{self.id}", self.reference_dir / f"{filename}.py")
        return {f.name: getattr(module, f.name) for f in self.spec.functions}

    @cached_property
    def reference(self) -> dict[str, Callable[..., Any]]:
        return self._functions("reference")

    @cached_property
    def oracle(self) -> dict[str, Callable[..., Any]]:
        return self._functions("oracle")

    @cached_property
    def misconceptions(self) -> list[Misconception]:
        """The known misreadings the judge diagnoses: reference/<id>/misconceptions.toml's (the file may be absent),
        then those the known-wrong declarations reference/<id>/wrong/*.toml hold in a `[misconception]` table."""
        parsed = {path: load_declaration(path) for path in declarations(self.reference_dir)}
        return load_misconceptions(
            self.reference_dir / "misconceptions.toml",
            lambda path: self.owner_checks(
                path, parsed[path].breaks if path in parsed else load_declaration(path).breaks
            ),
            self.reference_dir / "wrong",
            {path: d.misconception for path, d in parsed.items() if d.misconception is not None},
            lambda breaks: self.owner_checks(self.reference_dir / "misconceptions.toml", breaks),
        )

    def owner_checks(self, where: Path, breaks: Iterable[str]) -> list[str]:
        """The checks of the clauses `where` declares it breaks, in the spec's order; an unknown clause is an error."""
        breaks = set(breaks)
        unknown = self.spec.unknown_clauses(breaks)
        if unknown:
            raise SpecError(f"{where}: breaks undeclared clauses {unknown}; {self.id} declares {self.clause_ids}")
        return [c.id for c in self.spec.checks if c.clause in breaks]

    @property
    def clause_ids(self) -> str:
        return ", ".join(c.id for c in self.spec.clauses)

    def misconception_functions(self, misconception: Misconception) -> dict[str, Callable[..., Any]]:
        """The contract functions of the known-wrong solution that embodies `misconception` (trusted code); for a
        generic misreading declared without one, the reference's with its transform applied."""
        if misconception.solution is None:
            assert misconception.generic is not None
            transform = CATALOGUE[misconception.generic].transform
            return {name: transform(function) for name, function in self.reference.items()}
        module = load_module(
            f"paperleet_wrong_{self.id}_{misconception.id}", self.known_wrong_file(misconception.solution)
        )
        return {f.name: getattr(module, f.name) for f in self.spec.functions}

    def combination_functions(
        self, misconceptions: Sequence[Misconception], fitted: Mapping[str, float] | None = None
    ) -> dict[str, Callable[..., Any]] | None:
        """The contract functions of one solution that holds every one of `misconceptions` at once (trusted code),
        or None when their solutions' edits cannot be made in one file. A generic misreading is its transform,
        wrapped around the others' edits, and never its own solution's edits. `fitted` sets the parameter of each
        misreading it names (see `Parameter`)."""
        edited = [m for m in misconceptions if m.solution is not None and m.generic is None]
        if edited:
            self.known_wrong()  # the solutions' declarations are checked, and their edits with them
            stems = tuple(Path(str(m.solution)).stem for m in edited)
            path = combined(self.id, self.reference_dir, stems)
            if path is None:
                return None
            name = f"paperleet_wrong_{self.id}_{'__'.join(m.id for m in edited)}"
            if fitted:
                path = self._fitted_file(path, edited, fitted)
                if path is None:
                    return None
                name += "__" + hashlib.sha256(path.name.encode()).hexdigest()[:12]
            module = load_module(name, path)
            functions = {f.name: getattr(module, f.name) for f in self.spec.functions}
        else:
            functions = dict(self.reference)
        for misconception in misconceptions:
            if misconception.generic is not None:
                transform = CATALOGUE[misconception.generic].transform
                functions = {name: transform(function) for name, function in functions.items()}
        return functions

    def _fitted_file(self, path: Path, edited: Sequence[Misconception], fitted: Mapping[str, float]) -> Path | None:
        """The combined solution at `path` with each fitted parameter set, written beside it; None when a
        parameter's text is not in it exactly once."""
        text = path.read_text()
        for misconception in edited:
            if misconception.id in fitted and misconception.parameter is not None:
                changed = misconception.parameter.edit(text, fitted[misconception.id])
                if changed is None:
                    return None
                text = changed
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        target = path.with_name(f"{path.stem}@{digest}.py")
        if not target.is_file():
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, target)  # a concurrent grader writes the same bytes: either copy is the file
        return target

    @cached_property
    def grading_seeds(self) -> list[int]:
        """Hidden seeds, kept beside the reference; the first one grades, all of them validate."""
        path = self.reference_dir / "grading.toml"
        seeds = tomllib.loads(path.read_text()).get("seeds", [])
        if not seeds or not all(isinstance(s, int) for s in seeds):
            raise SpecError(f"{path} must hold `seeds = [int, ...]`")
        return list(seeds)

    def known_wrong(self) -> list[KnownWrong]:
        """Each solution declared in reference/<id>/wrong/*.toml, materialized as a file in the cache."""
        wrong = materialize(self.id, self.reference_dir)
        for known in wrong:
            self.owner_checks(known.declaration or known.path, known.breaks)
        return wrong

    def ports(self) -> list[Port]:
        """Each convention port declared in reference/<id>/ports/*.toml, with the clauses it breaks checked."""
        ports = load_ports(self.reference_dir)
        for port in ports:
            self.owner_checks(port.path.with_suffix(".toml"), port.breaks)
        return ports

    def known_wrong_file(self, name: str) -> Path:
        """The materialized file of the known-wrong solution `name` (its stem or file name)."""
        for known in self.known_wrong():
            if name in (known.path.name, known.path.stem):
                return known.path
        raise SpecError(f"{self.id} declares no known-wrong solution {name!r} in {self.reference_dir / 'wrong'}")

    @cached_property
    def content_hash(self) -> str:
        """sha256 over the problem's and reference's files, so a report names exactly what graded it."""
        digest = hashlib.sha256()
        for folder in (self.problem_dir, self.reference_dir):
            for path in grading_files(folder):
                digest.update(str(path.relative_to(self.root)).encode())
                digest.update(path.read_bytes())
        return digest.hexdigest()


def grading_files(folder: Path) -> list[Path]:
    """The files under a problem's folder that take part in grading it: not caches, and not `tests/`, the harness's
    own tests of the problem (reference/<id>/tests/), which a change must not make a new version of the problem."""
    return [
        path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.relative_to(folder).parts[0] != "tests"
    ]


def list_problems(root: Path = PROJECT_ROOT) -> list[str]:
    return sorted(p.parent.name for p in (root / "problems").glob("*/problem.toml"))
