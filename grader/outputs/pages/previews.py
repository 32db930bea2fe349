"""Reference previews of a problem's T3 plots: read from the previews folder, else drawn from the reference."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

from grader.judge.expectations import Expectations
from grader.model.problem import Problem
from grader.outputs.plots import draw

_lock = threading.Lock()
_drawn: dict[tuple[str, str], dict[str, bytes]] = {}


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def reference_previews(problem: Problem, previews_dir: Path) -> dict[str, bytes | None]:
    """PNG bytes per plot file; None where neither the folder nor the reference can give one."""
    found = {plot.file: _read(previews_dir / plot.file) for plot in problem.spec.plots}
    if all(found.values()):
        return found
    drawn = _drawn_previews(problem)
    return {file: data or drawn.get(file) for file, data in found.items()}


def _drawn_previews(problem: Problem) -> dict[str, bytes]:
    """Draw once per process (grade-all asks from many threads) into memory; the artifacts stay untouched."""
    key = (str(problem.root), problem.id)
    with _lock:
        if key not in _drawn:
            series = Expectations(problem, problem.spec.public_seed).series()
            with tempfile.TemporaryDirectory(prefix="paperleet-previews-") as tmp:
                written = draw(problem.spec.plots, series, Path(tmp), note="reference preview", reference=True)
                _drawn[key] = {file: (Path(tmp) / file).read_bytes() for file in written}
        return _drawn[key]
