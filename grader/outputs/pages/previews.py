"""Reference previews of a problem's T3 plots: read from the previews folder, else drawn from the caller's series."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from grader.model.problem import Problem
from grader.outputs.plots import draw


@dataclass(frozen=True)
class PreviewSource:
    """Where a problem's previews are read from, and the reference's series at the public seed to draw the missing
    ones from: asked for only when a preview is missing, since computing it runs the toy."""

    folder: Path
    series: Callable[[], dict[str, torch.Tensor]]


# The reference's own series, drawn on the trusted side: a loaded machine may take longer than a learner's job is given.
PREVIEW_TIMEOUT_S = 90.0
_lock = threading.Lock()
_drawn: dict[tuple[str, str], dict[str, bytes]] = {}


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def reference_previews(problem: Problem, source: PreviewSource) -> dict[str, bytes | None]:
    """PNG bytes per plot file; None where neither the folder nor the reference can give one."""
    found = {plot.file: _read(source.folder / plot.file) for plot in problem.spec.plots}
    if all(found.values()):
        return found
    drawn = _drawn_previews(problem, source.series)
    return {file: data or drawn.get(file) for file, data in found.items()}


def _drawn_previews(problem: Problem, reference_series: Callable[[], dict[str, torch.Tensor]]) -> dict[str, bytes]:
    """Draw once per process (grade-all asks from many threads) into memory; the artifacts stay untouched. A drawing
    that stopped short (out of time) is not kept, so a later grade draws again instead of missing previews for good."""
    key = (str(problem.root), problem.id)
    with _lock:
        if key in _drawn:
            return _drawn[key]
        series = reference_series()
        with tempfile.TemporaryDirectory(prefix="paperleet-previews-") as tmp:
            written = draw(
                problem.spec.plots,
                series,
                Path(tmp),
                note="reference preview",
                reference=True,
                timeout_s=PREVIEW_TIMEOUT_S,
            )
            drawn = {file: (Path(tmp) / file).read_bytes() for file in written}
        if len(drawn) == len(problem.spec.plots):
            _drawn[key] = drawn
        return drawn
