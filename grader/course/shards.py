"""Grade a class on many machines: deterministic shards of the submissions, and the merge of their reports.

`grade-all --shard K/N` grades the K-th of N slices (K from 0): the submissions sorted by file name, every
N-th one starting at the K-th. The slices are disjoint, cover the folder, and depend only on the file names,
so N array tasks on N machines grade each submission exactly once. `merge DIR...` reads every
`<stem>/report.json` the shards wrote and joins them into one class summary, once every shard has finished.

A shard's summary, `shards/shard-K-of-N.csv`, is its mark of completion: a shard removes it before grading and
writes it last, an empty slice too, so a shard killed, failed or never run leaves none, and `merge` names it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from grader.model.report import Report, load_report

USAGE = "expected K/N with whole numbers 0 <= K < N, e.g. --shard 0/10 up to --shard 9/10"
SUMMARY_NAME = re.compile(r"shard-(\d+)-of-(\d+)\.csv")
NAMED_AT_MOST = 10  # missing shards named in merge's refusal; a cluster's array can have thousands


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

    def summary(self, out: Path) -> Path:
        """This shard's own rows, under its --out folder; its presence says the shard finished."""
        return out / "shards" / f"shard-{self.index}-of-{self.count}.csv"

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


def _require_folders(dirs: list[Path]) -> None:
    for folder in dirs:
        if not folder.is_dir():
            raise ShardError(f"{folder}: no such folder; expected the --out folder of a grade-all shard")


def collect(dirs: list[Path]) -> list[Graded]:
    """Every `<stem>/report.json` under `dirs`, by stem; a stem graded twice, differently, is an error.

    Two identical reports of one stem are one grade seen twice (a folder merged into another and merged again).
    """
    _require_folders(dirs)
    found: dict[str, Graded] = {}
    for folder in dirs:
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


def _finished(dirs: list[Path]) -> dict[int, set[int]]:
    """The shard summaries under `dirs`: for each array size N, the K of every `shards/shard-K-of-N.csv`."""
    found: dict[int, set[int]] = {}
    for folder in dirs:
        for path in (folder / "shards").glob("shard-*-of-*.csv"):
            match = SUMMARY_NAME.fullmatch(path.name)
            if match is not None:
                found.setdefault(int(match.group(2)), set()).add(int(match.group(1)))
    return found


def _spans(indices: list[int]) -> str:
    """`0-2,5,7-8`: Slurm's --array syntax, short however many tasks are listed."""
    spans: list[list[int]] = []
    for k in indices:
        if spans and spans[-1][1] == k - 1:
            spans[-1][1] = k
        else:
            spans.append([k, k])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _named(dirs: list[Path]) -> str:
    """The folders given, or how many when a glob gave one per task."""
    return ", ".join(map(str, dirs)) if len(dirs) <= 3 else f"the {len(dirs)} folders given"


def require_every_shard(dirs: list[Path]) -> None:
    """Refuse an array with a shard that did not finish: its ungraded submissions would be missing from the
    summary without a word."""
    listed = _named(dirs)
    found = _finished(dirs)
    if not found:
        raise ShardError(
            f"no shards/shard-K-of-N.csv in {listed}: no grade-all --shard run finished there; "
            "expected the --out folders of grade-all shards"
        )
    if len(found) > 1:
        sizes = " and ".join(map(str, sorted(found)))
        raise ShardError(
            f"{listed} hold shard summaries of arrays of {sizes} shards: merge the shards of one run only "
            "(remove the other run's shards/shard-K-of-N.csv)"
        )
    ((count, done),) = found.items()
    missing = [k for k in range(count) if k not in done]
    if missing:
        named = ", ".join(f"{k}/{count}" for k in missing[:NAMED_AT_MOST])
        named += ", ..." if len(missing) > NAMED_AT_MOST else ""
        raise ShardError(
            f"{len(missing)} of {count} shards did not finish (no shards/shard-K-of-{count}.csv in {listed}): "
            f"{named}; their submissions may have no report yet. Rerun each with grade-all --shard K/{count} "
            f"(a Slurm job array: sbatch --array={_spans(missing)} with the array's script), then merge again"
        )


def merge(dirs: list[Path], out: Path) -> list[Graded]:
    """Join the shards' reports into `out` (their folders copied there, under the same names) and return them,
    sorted by folder; every shard of the array must have finished."""
    _require_folders(dirs)
    require_every_shard(dirs)
    graded = collect(dirs)
    gather(graded, out)
    return graded
