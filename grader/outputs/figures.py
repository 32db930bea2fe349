"""Draw prepared figures in a process of their own: `python -m grader.outputs.figures` (matplotlib only, no torch).

The judge (`grader.outputs.plots`) turns series into plain, bounded figure specs and starts this process with limits on
its memory and CPU time, so a plot that goes wrong costs one missing picture, never a grade. Protocol: the
limits as JSON on the command line; one line on stdin naming a JSON file of specs (an empty line: nothing to
draw); one JSON line on stdout, `{"written": [file, ...], "failed": {file: reason}}`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.8, 100  # 800 x 480 px: legible at the width a report page shows it
REFERENCE_STYLE: dict[str, Any] = {"color": "0.55", "alpha": 0.35, "linewidth": 4.0}  # faint, under the learner's lines
MISS_STYLE: dict[str, Any] = {"linestyle": "none", "marker": "x", "color": "#cf222e", "markersize": 7,
                             "markeredgewidth": 1.8}
OFF_SCALE_STYLE: dict[str, Any] = {"linestyle": "none", "color": "#cf222e", "markersize": 7}


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (capped, capped))


def apply_limits(limits: dict[str, int]) -> None:
    """Before matplotlib is imported: address space, CPU seconds and file size, as the judge asked."""
    _limit(resource.RLIMIT_AS, limits["address_space_bytes"])
    _limit(resource.RLIMIT_CPU, limits["cpu_s"])
    _limit(resource.RLIMIT_FSIZE, limits["file_bytes"])


def draw_figure(spec: dict[str, Any]) -> None:
    """One PNG from one spec (see `grader.outputs.plots.figure_specs`), written atomically."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    handles: list[Any] = []
    for ref in spec.get("reference", []):
        ax.plot(ref["x"], ref["y"], "-", zorder=1, **REFERENCE_STYLE)
    if spec.get("reference"):
        handles.append(Line2D([], [], label=spec["reference_label"], **REFERENCE_STYLE))
    for i, line in enumerate(spec["lines"]):
        (drawn,) = ax.plot(line["x"], line["y"], line["style"], color=f"C{i}", label=line["label"],
                           linewidth=1.6, markersize=3.5, zorder=3)
        handles.append(drawn)
    marks = spec.get("marks")
    if marks and marks["x"]:
        handles.append(ax.plot(marks["x"], marks["y"], label=marks["label"], zorder=4, **MISS_STYLE)[0])
    for edge, marker in (("above", "^"), ("below", "v")):
        off = spec.get("off_scale", {}).get(edge)
        if off and off["x"]:
            handles.append(ax.plot(off["x"], off["y"], marker=marker, label=off["label"], zorder=4,
                                   **OFF_SCALE_STYLE)[0])
    ax.set_xlim(*spec["xlim"])
    ax.set_ylim(*spec["ylim"])
    ax.set_title(spec["title"] + (f"\n{spec['note']}" if spec.get("note") else ""), fontsize=11)
    ax.set_xlabel(spec["xlabel"], fontsize=10)
    ax.set_ylabel(spec["ylabel"], fontsize=10)
    ax.grid(alpha=0.3)
    # below the axes, never over the data; two columns keep it short
    fig.legend(handles=handles, loc="outside lower center", ncols=2 if len(handles) > 2 else len(handles),
               fontsize=9, frameon=False)
    path = Path(spec["path"])
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def main() -> int:
    apply_limits(json.loads(sys.argv[1]))
    os.environ["MPLBACKEND"] = "Agg"
    import matplotlib.figure  # noqa: F401 - imported while the judge is still busy, before any spec arrives

    source = sys.stdin.readline().strip()
    written: list[str] = []
    failed: dict[str, str] = {}
    if source:
        for spec in json.loads(Path(source).read_text())["figures"]:
            try:
                draw_figure(spec)
                written.append(spec["file"])
            except (Exception, MemoryError) as exc:  # one figure's failure spares the others
                failed[spec["file"]] = f"{type(exc).__name__}: {exc}"[:300]
    sys.stdout.write(json.dumps({"written": written, "failed": failed}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
