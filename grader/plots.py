"""Draw a problem's declared T3 plots from a dict of 1-D series (the learner's or the reference's)."""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Mapping
from pathlib import Path

import torch

from .spec import PlotSpec


def draw(plots: list[PlotSpec], series: Mapping[str, torch.Tensor], out_dir: Path, note: str = "",
         reference: bool = False) -> list[str]:
    """Write every plot whose series are all present and aligned; return the file names written.

    Specs label the learner's curves "your ..."; a `reference` preview labels the same curves "reference ...".
    """
    # The object API (no pyplot) keeps no global state, so graders in parallel threads can draw at once.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in plots:
        x = series.get(plot.x)
        lines = [(line, series.get(line.y)) for line in plot.lines]
        if x is None or any(y is None or y.shape != x.shape for _, y in lines):
            continue
        fig = Figure(figsize=(7, 4.2), dpi=110)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for line, y in lines:
            assert y is not None
            label = re.sub(r"^your\b", "reference", line.label) if reference else line.label
            ax.plot(x.numpy(), y.numpy(), line.style, label=label, linewidth=1.6, markersize=3)
        ax.set_title(plot.title + (f"\n{note}" if note else ""), fontsize=10)
        ax.set_xlabel(plot.xlabel)
        ax.set_ylabel(plot.ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.subplots_adjust(left=0.1, right=0.97, top=0.86, bottom=0.13)  # fixed: tight_layout costs a render
        fig.savefig(out_dir / plot.file)
        written.append(plot.file)
    return written


class PlotJob:
    """Draw plots on a background thread as soon as the series arrive, while the checks go on.

    The thread imports matplotlib at once, so that cost overlaps the worker's start as well.
    """

    def __init__(self, plots: list[PlotSpec], out_dir: Path, note: str = "") -> None:
        self._plots, self._out_dir, self._note = plots, out_dir, note
        self._inbox: queue.SimpleQueue[Mapping[str, torch.Tensor] | None] = queue.SimpleQueue()
        self._written: list[str] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="plots", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            import matplotlib.backends.backend_agg  # noqa: F401 - warm the import while nothing else needs it

            series = self._inbox.get()
            if series:
                self._written = draw(self._plots, series, self._out_dir, self._note)
        except BaseException as exc:  # noqa: BLE001 - re-raised in result(), on the caller's thread
            self._error = exc

    def submit(self, series: Mapping[str, torch.Tensor] | None) -> None:
        self._inbox.put(series)

    def result(self) -> list[str]:
        """Wait for the drawing to finish (nothing is drawn if no series came); return the files written."""
        self._inbox.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._written
