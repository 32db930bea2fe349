"""A course's problem set: the learner pack and Gradescope zip of each chosen problem, and a handout index.

The packs and zips are built by the same functions as `learner-pack` and `gradescope-zip`, byte for byte, into
`learner/ID.zip` and `gradescope/ID.zip`; `index.md` lists the problems in the catalog's suggested order with
their titles, papers, difficulty and time, and says which zip each learner unpacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.course.catalog import Entry, select
from grader.course.gradescope_zip import build_zip
from grader.course.learner_pack import build_pack
from grader.model.problem import Problem
from grader.model.report import write_atomic

INDEX = "index.md"


class CourseSetError(Exception):
    """The set asked for cannot be chosen from the catalog; the message says why."""


@dataclass(frozen=True)
class Built:
    entry: Entry
    pack: Path
    autograder: Path


def choose(entries: Sequence[Entry], ids: Sequence[str] = (), tag: str | None = None) -> list[Entry]:
    """The chosen problems in the catalog's suggested order: those named, or every one with `tag`."""
    if ids:
        known = {entry.id for entry in entries}
        unknown = [pid for pid in ids if pid not in known]
        if unknown:
            raise CourseSetError(f"no problem {', '.join(unknown)}; `python -m grader problems` lists them")
        if len(set(ids)) != len(ids):
            raise CourseSetError("a problem is named twice")
        return [entry for entry in entries if entry.id in ids]
    chosen = select(entries, [tag] if tag else [])
    if not chosen:
        tags = sorted({t for entry in entries for t in entry.catalog.tags})
        raise CourseSetError(f"no problem has the tag {tag!r}; the tags are: {', '.join(tags)}")
    return chosen


def build_course_set(chosen: Sequence[Entry], out: Path, name: str) -> list[Built]:
    """Every chosen problem's pack and autograder zip under `out`, then the handout index; what was built."""
    built = []
    for entry in chosen:
        problem = Problem(entry.id)
        pack, autograder = out / "learner" / f"{entry.id}.zip", out / "gradescope" / f"{entry.id}.zip"
        build_pack(problem, pack)
        build_zip(problem, autograder)
        built.append(Built(entry, pack, autograder))
    write_atomic(out / INDEX, handout(built, name, out))
    return built


def _cell(text: str) -> str:
    """Text made safe for one cell of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")


def handout(built: Sequence[Built], name: str, out: Path) -> str:
    """The index learners read first: the order, then each problem's papers and how to start it."""
    in_set = {item.entry.id: n for n, item in enumerate(built, 1)}
    minutes = sum(item.entry.catalog.minutes for item in built)
    lines = [
        f"# {_cell(name)}",
        "",
        f"{len(built)} exercises, about {minutes / 60:.1f} hours in all. Do them in this order: each comes after the "
        "exercises it builds on.",
        "",
        "| # | exercise | difficulty | time | builds on | learner pack |",
        "|---|---|---|---|---|---|",
    ]
    for n, item in enumerate(built, 1):
        entry = item.entry
        lines.append(
            f"| {n} | {_cell(entry.title)} (`{entry.id}`) | {entry.catalog.difficulty} | {entry.catalog.minutes} min "
            f"| {_builds_on(entry, in_set)} | `{item.pack.relative_to(out).as_posix()}` |"
        )
    for n, item in enumerate(built, 1):
        entry = item.entry
        lines += [
            "",
            f"## {n}. {_cell(entry.title)}",
            "",
            _cell(entry.catalog.summary),
            "",
            f"Difficulty: {entry.catalog.difficulty} · time: about {entry.catalog.minutes} minutes · topics: "
            f"{', '.join(entry.catalog.tags)} · builds on: {_builds_on(entry, in_set)}",
            "",
            "Papers:",
            "",
        ]
        for paper in entry.catalog.papers:
            where = f" {paper.equations[:1].upper()}{paper.equations[1:]}." if paper.equations else ""
            link = f" <{paper.url}>" if paper.url else ""
            lines.append(f"- {_cell(paper.authors)} ({paper.year}). *{_cell(paper.title)}*.{where}{link}")
        lines += [
            "",
            f"Start: unzip `{item.pack.relative_to(out).as_posix()}`, read `{entry.id}/statement.md`, copy "
            f"`{entry.id}/starter.py` and run `python check my_solution.py` in `{entry.id}/`; "
            "`python check --progress` sums up your attempts.",
        ]
    return "\n".join(lines) + "\n"


def _builds_on(entry: Entry, in_set: dict[str, int]) -> str:
    named = [
        f"#{in_set[pid]} `{pid}`" if pid in in_set else f"`{pid}` (not in this set)" for pid in entry.catalog.builds_on
    ]
    return ", ".join(named) or "-"
