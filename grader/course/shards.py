"""Grade a class on many machines: deterministic shards of the submissions, and the merge of their reports.

`grade-all --shard K/N` grades the K-th of N slices (K from 0): the submissions sorted by file name, every
N-th one starting at the K-th. The slices are disjoint, cover the folder, and depend only on the file names,
so N array tasks on N machines grade each submission exactly once. `merge DIR...` reads every
`<stem>/report.json` the shards wrote and joins them into one class summary.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from grader.outputs.report import Report, load_report

USAGE = "expected K/N with whole numbers 0 <= K < N, e.g. --shard 0/10 up to --shard 9/10"


class ShardError(Exception):
    """A shard was asked for or merged wrongly; the message says what was expected."""


@dataclass(frozen=True)
class Shard:
    """The `index`-th of `count` slices of a folder of submissions."""

    index: int
    count: int

    def select(self, files: Iterable[Path]) -> list[Path]:
        """Every `count`-th file by name, from the `index`-th: round robin spreads slow names over all shards."""
        ordered = sorted(files, key=lambda path: (path.name, str(path)))
        return ordered[self.index :: self.count]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ShardError(f"--shard {text!r}: {USAGE}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or index >= count:
        raise ShardError(f"--shard {text!r}: K must be at least 0 and less than N; {USAGE}")
    return Shard(index, count)


@dataclass(frozen=True)
class Graded:
    """One submission's report as a shard wrote it: `folder` is `<shard out>/<stem>/`."""

    folder: Path
    report: Report


def _read(path: Path) -> Report:
    try:
        return load_report(path)
    except (OSError, ValueError, ValidationError) as exc:
        why = type(exc).__name__
        raise ShardError(f"{path}: not a readable report.json ({why}); grade that submission again") from None


def collect(dirs: list[Path]) -> list[Graded]:
    """Every `<stem>/report.json` under `dirs`, by stem; a stem graded twice, differently, is an error.

    Two identical reports of one stem are one grade seen twice (a folder merged into another and merged again).
    """
    found: dict[str, Graded] = {}
    for folder in dirs:
        if not folder.is_dir():
            raise ShardError(f"{folder}: no such folder; expected the --out folder of a grade-all shard")
        for path in sorted(folder.glob("*/report.json")):  # none at all: a shard whose slice was empty
            stem, where = path.parent.name, path.parent.resolve()
            if stem in found and (found[stem].folder / "report.json").read_bytes() != path.read_bytes():
                raise ShardError(
                    f"{stem} was graded twice, in {found[stem].folder.parent} and {folder}; "
                    "merge the shards of one run only"
                )
            found.setdefault(stem, Graded(where, _read(path)))
    if not found:
        listed = ", ".join(map(str, dirs))
        raise ShardError(f"no <submission>/report.json in {listed}; expected the --out folders of grade-all shards")
    graded = [found[stem] for stem in sorted(found)]
    _same_grading(graded)
    return graded


def _same_grading(graded: list[Graded]) -> None:
    """A class summary compares like with like: one problem, one version of it, one seed."""
    for field in ("problem", "problem_hash", "seed"):
        values = {str(getattr(g.report, field)) for g in graded}
        if len(values) > 1:
            raise ShardError(
                f"the reports disagree on {field} ({', '.join(sorted(values))}): "
                "every shard must grade the same problem, at the same version, with the same seed"
            )


def gather(graded: list[Graded], out: Path) -> None:
    """Copy each submission's folder into `out`, so the dashboard's `<stem>/report.html` links resolve there."""
    out.mkdir(parents=True, exist_ok=True)
    for item in graded:
        target = out / item.folder.name
        if target.resolve() == item.folder:
            continue
        if target.exists():
            shutil.rmtree(target)  # a stale copy from an earlier merge into the same folder
        shutil.copytree(item.folder, target)


def merge(dirs: list[Path], out: Path) -> list[Graded]:
    """Join the shards' reports into `out` (their folders copied there, under the same names) and return them,
    sorted by folder."""
    graded = collect(dirs)
    gather(graded, out)
    return graded
