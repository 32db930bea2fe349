"""The catalog: every problem's `[catalog]` table, checked across problems, put in a suggested order, and shown.

Each problem's spec validates its own table (`model/spec.py`, `Catalog`); what only the whole set can decide is
checked here: ids and titles unique, each `builds_on` naming a problem of the set, and no circle of
prerequisites. The suggested order does every exercise after those it builds on and, among the exercises ready
at a point, the easiest first, then the shortest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grader.model.spec import DIFFICULTIES, Catalog, ProblemSpec, SpecError, load_spec
from grader.paths import PROJECT_ROOT


@dataclass(frozen=True)
class Entry:
    """One exercise as the catalog lists it; `order` counts from 1 in the suggested order."""

    order: int
    id: str
    title: str
    catalog: Catalog

    def to_data(self) -> dict[str, Any]:
        return {"order": self.order, "id": self.id, "title": self.title, **self.catalog.model_dump()}


def catalog_errors(specs: Sequence[ProblemSpec]) -> list[str]:
    """What is wrong with these problems taken together, one sentence each; empty when nothing is."""
    errors = []
    ids = [spec.id for spec in specs]
    errors += [
        f"problem id {pid!r} is used by {ids.count(pid)} problems" for pid in sorted(set(ids)) if ids.count(pid) > 1
    ]
    titles: dict[str, list[str]] = {}
    for spec in specs:
        titles.setdefault(spec.title.strip().casefold(), []).append(spec.id)
    errors += [
        f"problems {', '.join(sorted(same))} share the title {key!r}" for key, same in titles.items() if len(same) > 1
    ]
    known = set(ids)
    for spec in specs:
        unknown = [other for other in spec.catalog.builds_on if other not in known]
        if unknown:
            errors.append(f"{spec.id}: catalog.builds_on names {', '.join(unknown)}, which are not problems")
    if not errors and (circle := _circle(specs)):
        errors.append(f"catalog.builds_on goes round in a circle: {' -> '.join(circle)}")
    return errors


def _circle(specs: Sequence[ProblemSpec]) -> list[str]:
    """A circle of prerequisites, as the ids along it (the first repeated at the end), or [] if there is none."""
    needs = {spec.id: spec.catalog.builds_on for spec in specs}
    done: set[str] = set()

    def walk(pid: str, path: list[str]) -> list[str]:
        if pid in path:
            return [*path[path.index(pid) :], pid]
        if pid in done:
            return []
        for other in needs.get(pid, []):
            if found := walk(other, [*path, pid]):
                return found
        done.add(pid)
        return []

    for pid in sorted(needs):
        if found := walk(pid, []):
            return found
    return []


def suggested_order(specs: Sequence[ProblemSpec]) -> list[ProblemSpec]:
    """Every problem after those it builds on; among those ready, easiest, then shortest, then by id."""
    left = {spec.id: spec for spec in specs}
    ordered: list[ProblemSpec] = []
    while left:
        placed = {spec.id for spec in ordered}
        ready = [spec for spec in left.values() if set(spec.catalog.builds_on) <= placed]
        if not ready:  # a circle: catalog_errors names it; the rest keep their easiest-first order
            ready = list(left.values())
        spec = min(ready, key=lambda s: (DIFFICULTIES.index(s.catalog.difficulty), s.catalog.minutes, s.id))
        ordered.append(left.pop(spec.id))
    return ordered


def problem_specs(problems_dir: Path | None = None) -> list[ProblemSpec]:
    """Every problem's spec, each checked on its own (a problem without its `[catalog]` table is refused)."""
    folder = problems_dir or PROJECT_ROOT / "problems"
    specs = []
    for path in sorted(folder.glob("*/problem.toml")):
        spec = load_spec(path)
        if spec.id != path.parent.name:
            raise SpecError(f"{path}: id {spec.id!r} differs from its folder's name {path.parent.name!r}")
        specs.append(spec)
    return specs


def load_catalog(problems_dir: Path | None = None) -> list[Entry]:
    """The whole catalog in its suggested order; SpecError when a problem, or the set, is invalid."""
    specs = problem_specs(problems_dir)
    if errors := catalog_errors(specs):
        raise SpecError("the catalog: " + "; ".join(errors))
    return [Entry(n, spec.id, spec.title, spec.catalog) for n, spec in enumerate(suggested_order(specs), 1)]


def select(entries: Sequence[Entry], tags: Sequence[str] = (), difficulty: str | None = None) -> list[Entry]:
    """The entries carrying every tag of `tags` (in any case) and, if given, of that difficulty."""
    wanted = {tag.casefold() for tag in tags}
    return [
        entry
        for entry in entries
        if wanted <= {tag.casefold() for tag in entry.catalog.tags}
        and (difficulty is None or entry.catalog.difficulty == difficulty)
    ]


def cite(entry: Entry) -> str:
    """The exercise's first paper in a table's width: its title, first author and year."""
    paper = entry.catalog.papers[0]
    authors = paper.authors.split(", ")
    first = authors[0].removesuffix(" et al.")
    more = " et al." if len(authors) > 1 or paper.authors.endswith(" et al.") else ""
    return f"{paper.title} ({first}{more}, {paper.year})"


def catalog_table(entries: Sequence[Entry]) -> Table:
    table = Table(title=f"PaperLeet exercises ({len(entries)}), in the suggested order", show_lines=True)
    for column in ("#", "id", "title", "paper", "tags", "difficulty", "builds on", "min"):
        table.add_column(column, overflow="fold", max_width=44 if column in ("title", "paper") else None)
    for entry in entries:
        table.add_row(
            str(entry.order),
            entry.id,
            escape(entry.title),
            escape(cite(entry)),
            escape(", ".join(entry.catalog.tags)),
            entry.catalog.difficulty,
            ", ".join(entry.catalog.builds_on) or "-",
            str(entry.catalog.minutes),
        )
    return table


def print_catalog(entries: Sequence[Entry], as_json: bool = False, console: Console | None = None) -> None:
    if as_json:
        print(json.dumps([entry.to_data() for entry in entries], indent=2))
        return
    console = console or Console(width=160, highlight=False)
    console.print(catalog_table(entries))
    if not entries:
        console.print("no exercise matches; `python -m grader problems` lists them all")
