"""Draw a problem's declared T3 plots from a dict of 1-D series (the learner's or the reference's)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from .spec import PlotSpec


def draw(plots: list[PlotSpec], series: Mapping[str, torch.Tensor], out_dir: Path, note: str = "") -> list[str]:
    """Write every plot whose series are all present and aligned; return the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in plots:
        x = series.get(plot.x)
        lines = [(line, series.get(line.y)) for line in plot.lines]
        if x is None or any(y is None or y.shape != x.shape for _, y in lines):
            continue
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        for line, y in lines:
            assert y is not None
            ax.plot(x.tolist(), y.tolist(), line.style, label=line.label, linewidth=1.6, markersize=3)
        ax.set_title(plot.title + (f"\n{note}" if note else ""), fontsize=10)
        ax.set_xlabel(plot.xlabel)
        ax.set_ylabel(plot.ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / plot.file)
        plt.close(fig)
        written.append(plot.file)
    return written
