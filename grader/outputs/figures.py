"""Draw prepared figures in a process of their own: `python -m grader.outputs.figures` (matplotlib only, no torch).

The judge (`grader.outputs.plots`) turns series into plain, bounded figure specs and starts this process with limits on
its memory and CPU time, so a plot that goes wrong costs one missing picture, never a grade. Protocol: the
limits as JSON on the command line; one line on stdin naming a JSON file of specs (an empty line: nothing to
draw); one JSON line on stdout, `{"written": [file, ...], "failed": {file: reason}}`.

With a socket's file descriptor after the limits, it is a server instead (`serve`): it imports matplotlib and
draws a throwaway figure once, then forks one drawing process per job, each speaking the protocol above on the
pipes the judge sends with the job.
"""

from __future__ import annotations

import array
import contextlib
import io
import json
import math
import os
import resource
import select
import socket
import struct
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.8, 100  # 800 x 480 px: legible at the width a report page shows it
REFERENCE_STYLE: dict[str, Any] = {"color": "0.55", "alpha": 0.35, "linewidth": 4.0}  # faint, under the learner's lines
FORMAT_COLORS = set("bgrcmykw")  # the colour letters of a matplotlib format string; no marker or line uses one
MISS_COLOR = "#cf222e"
# a filled X in the colour of the curve that misses, edged in red: which curve, and that it is a miss
MISS_STYLE: dict[str, Any] = {
    "linestyle": "none",
    "marker": "X",
    "markeredgecolor": MISS_COLOR,
    "markersize": 9,
    "markeredgewidth": 1.2,
}
STATUS = struct.Struct(">i")  # a drawing process's pid, then its exit status, between the server and the judge
OFF_SCALE_STYLE: dict[str, Any] = {"linestyle": "none", "color": "#cf222e", "markersize": 7}
# Fixed margins, in inches, instead of a constrained layout, which measures every text and so draws each figure
# twice: room for y tick labels of up to about ten characters and the y label on the left, for the title lines
# above, and below for the x tick labels, the x label and each row of the legend.
LEFT_IN, RIGHT_IN = 1.0, 0.25
TITLE_LINE_IN, TOP_PAD_IN = 11 * 1.3 / 72, 0.12
X_AXIS_IN, LEGEND_ROW_IN, BOTTOM_PAD_IN = 0.58, 9 * 1.45 / 72, 0.06


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
    fig = figure_of(spec)
    path = Path(spec["path"])
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def figure_of(spec: dict[str, Any]) -> Any:
    """The figure a spec describes, not yet rendered."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    ax = fig.add_subplot()
    handles: list[Any] = []
    for ref in spec.get("reference", []):
        ax.plot(ref["x"], ref["y"], "-", zorder=1, **REFERENCE_STYLE)
    if spec.get("reference"):
        handles.append(Line2D([], [], label=spec["reference_label"], **REFERENCE_STYLE))
    colors = []
    for i, line in enumerate(spec["lines"]):
        own: dict[str, Any] = (
            {} if set(line["style"]) & FORMAT_COLORS else {"color": f"C{i}"}
        )  # a style's colour stands
        (drawn,) = ax.plot(
            line["x"], line["y"], line["style"], label=line["label"], linewidth=1.6, markersize=3.5, zorder=3, **own
        )
        handles.append(drawn)
        colors.append(drawn.get_color())
    for marks in spec.get("marks", []):  # each curve's misses in its own colour, ringed in red, each in the legend
        if marks["x"]:
            color = colors[marks["line"]] if 0 <= marks["line"] < len(colors) else MISS_COLOR
            style = {**MISS_STYLE, "markerfacecolor": color}
            handles.append(ax.plot(marks["x"], marks["y"], label=marks["label"], zorder=4, **style)[0])
    for edge, marker in (("above", "^"), ("below", "v")):
        off = spec.get("off_scale", {}).get(edge)
        if off and off["x"]:
            handles.append(
                ax.plot(off["x"], off["y"], marker=marker, label=off["label"], zorder=4, **OFF_SCALE_STYLE)[0]
            )
    ax.set_xlim(*spec["xlim"])
    ax.set_ylim(*spec["ylim"])
    if spec.get("integer_x"):
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    title = spec["title"] + (f"\n{spec['note']}" if spec.get("note") else "")
    ax.set_title(title, fontsize=11, y=1.0)  # a fixed place: no measuring of the axis below it
    ax.set_xlabel(spec["xlabel"], fontsize=10)
    ax.set_ylabel(spec["ylabel"], fontsize=10)
    ax.grid(alpha=0.3)
    # below the axes, never over the data; two columns keep it short
    columns = 2 if len(handles) > 2 else max(len(handles), 1)
    _place(fig, title.count("\n") + 1, math.ceil(len(handles) / columns))
    fig.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, BOTTOM_PAD_IN / HEIGHT_IN),
        ncols=columns,
        fontsize=9,
        frameon=False,
    )
    return fig


def _place(fig: Any, title_lines: int, legend_rows: int) -> None:
    """The axes inside fixed margins that leave room for the title, the axis labels and the legend."""
    top = TOP_PAD_IN + title_lines * TITLE_LINE_IN
    bottom = BOTTOM_PAD_IN + X_AXIS_IN + legend_rows * LEGEND_ROW_IN
    fig.subplots_adjust(
        left=LEFT_IN / WIDTH_IN, right=1 - RIGHT_IN / WIDTH_IN, top=1 - top / HEIGHT_IN, bottom=bottom / HEIGHT_IN
    )


def draw_job() -> None:
    """One job: the specs file named on stdin drawn, the outcome as one JSON line on stdout."""
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
    sys.stdout.flush()


def _warm_up() -> None:
    """Draw a throwaway figure in memory: fonts, the text cache and the PNG writer are loaded once, before any
    job, and every process forked from here starts with them."""
    line = {"x": [0, 1], "y": [1, 0], "label": "l", "style": "o-"}
    spec = {
        "title": "t\nn",
        "xlabel": "x",
        "ylabel": "y",
        "xlim": [0, 1],
        "ylim": [0, 1],
        "reference_label": "r",
        "reference": [line],
        "lines": [line],
        "marks": [{"x": [0.5], "y": [0.5], "label": "m", "line": 0}],
    }
    figure_of(spec).savefig(io.BytesIO(), format="png")


def _job_fds(sock: socket.socket) -> list[int] | None:
    """The next job's pipe ends (stdin, stdout, stderr, status), or None once the judge has closed the socket."""
    fds = array.array("i")
    data, ancdata, _, _ = sock.recvmsg(16, socket.CMSG_LEN(4 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if not data or len(fds) != 4:
        for fd in fds:
            os.close(fd)
        return None
    return list(fds)


def _drawer(sock: socket.socket, fds: list[int]) -> NoReturn:
    """In a forked child: a process group of its own, on the job's pipes, that draws one job and exits."""
    code = 1
    try:
        sock.close()
        os.setpgid(0, 0)  # the judge ends it, and whatever it started, by its process group (the server sets it too)
        for source, target in zip(fds[:3], (0, 1, 2), strict=True):
            os.dup2(source, target)
        os.closerange(3, 1 << 16)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        draw_job()
        code = 0
    except BaseException:  # said on stderr; never return into the server's loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    os._exit(code)


def serve(sock: socket.socket) -> None:
    """Fork one drawing process per job until the judge closes the socket: each starts with matplotlib imported
    and warm, under the limits applied here (its CPU time counted from its own start), and sees only its job.
    The exit status of each goes to the job's status pipe once it is reaped."""
    _warm_up()
    sock.sendall(b"ready")
    status: dict[int, int] = {}
    while True:
        with contextlib.suppress(ChildProcessError):
            while (ended := os.waitpid(-1, os.WNOHANG))[0]:
                fd = status.pop(ended[0])
                with contextlib.suppress(OSError):
                    os.write(fd, STATUS.pack(os.waitstatus_to_exitcode(ended[1])))
                os.close(fd)
        if not select.select([sock], [], [], 0.05 if status else 1.0)[0]:
            continue
        fds = _job_fds(sock)
        if fds is None:
            return
        pid = os.fork()
        if pid == 0:
            _drawer(sock, fds)
        # the group exists before the judge learns the pid, however late the child runs: else a kill of the
        # group could come first and miss it
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        for fd in fds[:3]:
            os.close(fd)
        status[pid] = fds[3]
        sock.sendall(STATUS.pack(pid))


def main() -> int:
    apply_limits(json.loads(sys.argv[1]))
    os.environ["MPLBACKEND"] = "Agg"
    import matplotlib.figure  # noqa: F401 - imported while the judge is still busy, before any spec arrives

    if len(sys.argv) > 2:  # a server for many jobs: the judge's end of a socket
        serve(socket.socket(fileno=int(sys.argv[2])))
        return 0
    draw_job()
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    os._exit(status)  # the judge waits for this process's end: no tearing matplotlib's modules down first
