"""A problem's declared T3 plots: series made bounded and plain here, drawn by `grader.outputs.figures` in a process of
its own with a time and memory limit. A plot that cannot be drawn is a missing plot with a reason, never an error.

A learner's plot shows the learner's lines from a run of the toy at the public seed over the reference's at the same
seed (faint, the preview's series), with each curve's points that leave the checks' tolerance marked on that curve;
beside it the reference preview is drawn with the same limits. Like is compared with like: the learner's curve, the
faint reference and the preview all come from the same inputs. The grading seed's series, the reference's and the
learner's, decide verdicts and never reach a plot.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import importlib.metadata
import json
import math
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from grader.model.spec import CheckSpec, PlotSpec, Tolerance
from grader.outputs.drawing import LIMITS, PACKAGE_PARENT, drawing_environment, start_drawing
from grader.outputs.figures import STATUS
from grader.paths import cache_dir
from grader.text import clean_line

MAX_PLOT_POINTS = 4096  # points per drawn line: longer series are thinned evenly; more would only cost the judge
MAX_MARKS = 512  # marked points per figure
PLOT_TIMEOUT_S = 60.0  # wall time for all of one job's figures, from the moment its series arrive
REFERENCE_LABEL = "reference, public seed (faint)"
PLOTTABLE_INTEGERS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def preview_file(file: str) -> str:
    """The reference preview drawn beside the learner's `file` with the same limits, under the same name in a
    `previews/` folder of the submission's own (as the problem's previews are in theirs)."""
    return f"previews/{file}"


class Unplottable(Exception):
    """A series that cannot be drawn; the message says why."""


def series_tolerances(checks: list[CheckSpec]) -> dict[str, Tolerance]:
    """The tolerance of every series an experiment check compares; exact checks compare bit for bit."""
    return {
        name: Tolerance(rtol=0.0, atol=0.0) if check.exact else Tolerance(rtol=check.rtol, atol=check.atol)
        for check in checks
        if check.kind == "experiment"
        for name in check.series
    }


def plottable(value: Any, name: str) -> torch.Tensor:
    """`value` as a 1-D CPU tensor of real numbers, or Unplottable; nothing is copied yet."""
    if type(value) is not torch.Tensor:
        raise Unplottable(f"series {name} is not a tensor")
    if value.layout != torch.strided or value.is_nested or value.is_quantized or value.device.type != "cpu":
        raise Unplottable(f"series {name} is not a dense CPU tensor")
    if value.dim() != 1:
        raise Unplottable(f"series {name} has {value.dim()} dimensions, not 1")
    if value.is_complex() or not (value.is_floating_point() or value.dtype in PLOTTABLE_INTEGERS):
        raise Unplottable(f"series {name} has dtype {value.dtype}, which cannot be plotted")
    return value.detach()


def thinned(value: torch.Tensor) -> torch.Tensor:
    """At most MAX_PLOT_POINTS evenly spaced points, as float64 (any float type, bfloat16 and float8 included,
    converts exactly); a view is taken first, so a long series costs no more than a short one."""
    step = max(1, math.ceil(value.numel() / MAX_PLOT_POINTS))
    return value[::step].to(torch.float64)


@dataclass(frozen=True)
class _Panel:
    """One plot's lines, each as (x, y) float64 of at most MAX_PLOT_POINTS points."""

    x: torch.Tensor
    lines: list[torch.Tensor]


def _panel(plot: PlotSpec, series: Mapping[str, Any]) -> _Panel:
    if plot.x not in series:
        raise Unplottable(f"series {plot.x} is missing")
    x = plottable(series[plot.x], plot.x)
    lines = []
    for line in plot.lines:
        if line.y not in series:
            raise Unplottable(f"series {line.y} is missing")
        y = plottable(series[line.y], line.y)
        if y.shape != x.shape:
            raise Unplottable(f"series {line.y} has {y.numel()} points and {plot.x} has {x.numel()}")
        lines.append(thinned(y))
    return _Panel(thinned(x), lines)


def _finite(values: list[torch.Tensor]) -> torch.Tensor:
    joined = torch.cat([v.flatten() for v in values]) if values else torch.zeros(0, dtype=torch.float64)
    return joined[torch.isfinite(joined)]


def axis_limits(learner: list[torch.Tensor], references: list[torch.Tensor]) -> tuple[float, float]:
    """Limits that show the reference whole and the learner's values near it; a value far off (a blow-up, an
    overflow) is drawn at the edge as off-scale rather than flattening every curve."""
    ref = _finite(references)
    mine = _finite(learner)
    if ref.numel():
        lo, hi = float(ref.min()), float(ref.max())
        span = hi - lo or max(abs(hi), 1.0)
        near = mine[(mine >= lo - 2 * span) & (mine <= hi + 2 * span)]
        if near.numel():
            lo, hi = min(lo, float(near.min())), max(hi, float(near.max()))
    elif mine.numel():
        lo, hi = float(mine.min()), float(mine.max())
    else:
        lo, hi = -1.0, 1.0
    lo, hi = max(lo, -1e300), min(hi, 1e300)  # so that hi - lo and the padding stay finite
    pad = (hi / 2 - lo / 2) * 0.1 or max(abs(hi) * 0.05, 0.05)
    return lo - pad, hi + pad


def _pulled_in(values: torch.Tensor, lo: float, hi: float) -> list[float]:
    """Values for the renderer: far-off ones pulled in to just beyond the limits (a line still leaves the axes
    where it should, and no astronomically large coordinate reaches Agg); inf and NaN become gaps."""
    reach = 10 * (hi / 2 - lo / 2)
    finite = values.nan_to_num(nan=math.nan, posinf=math.nan, neginf=math.nan)
    return finite.clamp(lo - reach, hi + reach).tolist()


def _points(x: torch.Tensor, y: torch.Tensor, where: torch.Tensor) -> dict[str, list[float]]:
    """The points of `where`, at most MAX_MARKS of them spread evenly over the whole run, not its first ones."""
    index = where.nonzero().flatten()
    if index.numel() > MAX_MARKS:
        index = index[torch.linspace(0, index.numel() - 1, MAX_MARKS).round().long()]
    return {"x": x[index].tolist(), "y": y[index].tolist()}


def outside_tolerance(got: torch.Tensor, want: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """Where `got` leaves `want` by more than the tolerance; NaN matches NaN and inf matches inf of its sign."""
    close = (got - want).abs() <= tol.atol + tol.rtol * want.abs()
    return ~(close | (got == want) | (got.isnan() & want.isnan()))


def _label(label: str, reference: bool) -> str:
    return clean_line(re.sub(r"^your\b", "reference", label) if reference else label)


def _base_spec(
    plot: PlotSpec, out_dir: Path, file: str, note: str, xlim: tuple[float, float], ylim: tuple[float, float]
) -> dict[str, Any]:
    ylabel = plot.ylabel or (plot.lines[0].label if len(plot.lines) == 1 else "value")
    return {
        "file": file,
        "path": str(out_dir / file),
        "title": clean_line(plot.title),
        "note": clean_line(note),
        "xlabel": clean_line(plot.xlabel or plot.x),
        "ylabel": clean_line(_label(ylabel, False)),
        "xlim": list(xlim),
        "ylim": list(ylim),
        "reference_label": REFERENCE_LABEL,
    }


def _line_specs(plot: PlotSpec, panel: _Panel, spec: dict[str, Any], reference: bool) -> list[dict[str, Any]]:
    x = _pulled_in(panel.x, *spec["xlim"])
    return [
        {"x": x, "y": _pulled_in(y, *spec["ylim"]), "label": _label(line.label, reference), "style": line.style}
        for line, y in zip(plot.lines, panel.lines, strict=True)
    ]


def _learner_spec(
    spec: dict[str, Any], plot: PlotSpec, mine: _Panel, shown: _Panel | None, tolerances: Mapping[str, Tolerance]
) -> dict[str, Any]:
    """`shown` (the reference at the learner's seed, the public one) is the faint overlay, and each of the
    learner's curves is marked where it leaves its own reference curve."""
    (xlo, xhi), (lo, hi) = spec["xlim"], spec["ylim"]
    spec["lines"] = _line_specs(plot, mine, spec, reference=False)
    spec["reference"] = (
        [] if shown is None else [{"x": _pulled_in(shown.x, xlo, xhi), "y": _pulled_in(y, lo, hi)} for y in shown.lines]
    )
    x = mine.x.clamp(xlo, xhi)
    spec["marks"] = []
    for index, (line, y, want) in enumerate(
        zip(plot.lines, mine.lines, shown.lines if shown else [None] * len(plot.lines), strict=True)
    ):
        tol = tolerances.get(line.y)
        if tol is None or want is None or want.shape != y.shape:
            continue
        # a miss beyond a zoomed x axis is not drawn: its curve is not drawn there either
        bad = outside_tolerance(y, want, tol) & (mine.x >= xlo) & (mine.x <= xhi)
        if bad.any():  # each curve's own misses, on that curve: two curves missing at one x are both marked
            at = y.nan_to_num(nan=lo).clamp(lo, hi)  # NaN: marked on the lower edge, never on the reference
            label = f"{_label(line.label or line.y, False)}: outside tolerance"
            spec["marks"].append({**_points(x, at, bad), "label": clean_line(label), "line": index})
    above = torch.zeros_like(x, dtype=torch.bool)
    below = torch.zeros_like(above)
    for y in mine.lines:
        above |= y > hi
        below |= y < lo
    spec["off_scale"] = {
        "above": {**_points(x, torch.full_like(x, hi), above), "label": "off scale, above"},
        "below": {**_points(x, torch.full_like(x, lo), below), "label": "off scale, below"},
    }
    return spec


def figure_specs(
    plots: list[PlotSpec],
    series: Mapping[str, Any],
    out_dir: Path,
    note: str = "",
    preview: Mapping[str, Any] | None = None,
    tolerances: Mapping[str, Tolerance] | None = None,
    as_reference: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """What `grader.outputs.figures` draws for these series, and why any plot cannot be drawn.

    `preview` is the reference's series at the seed of `series` (the public seed): it is overlaid faintly, each
    learner curve is marked where it leaves its reference curve by more than `tolerances`, it sets the limits with
    the learner's own values, and it is drawn beside (`preview_file`) with the same limits. `as_reference` draws
    `series` as a preview itself: curves labelled "your ..." are the reference's there.
    """
    specs: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    for plot in plots:
        try:
            mine = _panel(plot, series)
        except Unplottable as why:
            if plot.x in series or any(line.y in series for line in plot.lines):
                failures[plot.file] = str(why)  # a plot with no series at all: the T3 checks say why
            continue
        shown = _optional_panel(plot, preview)
        anchors = [shown] if shown is not None else []
        zoom = differences(plot, shown if shown is not None else mine)
        xlim = zoom or axis_limits([mine.x], [panel.x for panel in anchors])
        ylim = axis_limits(_within(mine, zoom), [y for panel in anchors for y in _within(panel, zoom)])
        spec = {**_base_spec(plot, out_dir, plot.file, note, xlim, ylim), "integer_x": plot.integer_x}
        if as_reference:
            specs.append({**spec, "lines": _line_specs(plot, mine, spec, reference=True)})
            continue
        specs.append(_learner_spec(spec, plot, mine, shown, tolerances or {}))
        if shown is not None:
            beside = _base_spec(plot, out_dir, preview_file(plot.file), "reference preview (public seed)", xlim, ylim)
            beside["integer_x"] = plot.integer_x
            specs.append({**beside, "lines": _line_specs(plot, shown, beside, reference=True)})
    return specs, failures


def differences(plot: PlotSpec, panel: _Panel) -> tuple[float, float] | None:
    """The x range of `plot.zoom_to_differences`: where those curves of `panel` differ from one another (beyond
    float rounding), with as much again on each side, within the data; None when they never differ."""
    if not plot.zoom_to_differences:
        return None
    curves = [panel.lines[i] for i, line in enumerate(plot.lines) if line.y in plot.zoom_to_differences]
    differ = torch.zeros_like(panel.x, dtype=torch.bool)
    for curve in curves[1:]:
        close = (curve - curves[0]).abs() <= 1e-9 + 1e-6 * curves[0].abs()
        differ |= ~(close | (curve.isnan() & curves[0].isnan()))
    where = panel.x[differ & panel.x.isfinite()]
    if not where.numel():
        return None
    lo, hi = float(where.min()), float(where.max())
    span = hi - lo or float(panel.x[panel.x.isfinite()].max() - panel.x[panel.x.isfinite()].min()) / 20 or 1.0
    finite = panel.x[panel.x.isfinite()]
    return max(lo - span, float(finite.min())), min(hi + span, float(finite.max()))


def _within(panel: _Panel, xlim: tuple[float, float] | None) -> list[torch.Tensor]:
    """The panel's curves where x lies within `xlim` (all of them without one): what the y limits must show."""
    if xlim is None:
        return panel.lines
    inside = (panel.x >= xlim[0]) & (panel.x <= xlim[1])
    return [y[inside] for y in panel.lines]


def _optional_panel(plot: PlotSpec, series: Mapping[str, Any] | None) -> _Panel | None:
    if series is None:
        return None
    try:
        return _panel(plot, series)
    except Unplottable:
        return None


def _picture_key(spec: dict[str, Any]) -> str:
    """What a figure's pixels depend on: everything in its spec but where it is written."""
    drawn = {key: value for key, value in spec.items() if key not in ("file", "path")}
    return hashlib.sha256(json.dumps(drawn, sort_keys=True).encode()).hexdigest()


def stored_preview(spec: dict[str, Any]) -> Path | None:
    """Where the picture of a preview drawn beside a learner's plot is kept between runs, or None for a figure of
    the learner's. A preview shows the reference's curves at the public seed, so most grades ask for the same
    pictures again: those are copied, not drawn. Its spec, and the drawing library's version, name it."""
    if not spec["file"].startswith(preview_file("")):
        return None
    key = _picture_key({**spec, "matplotlib": _matplotlib_version()})
    return cache_dir() / "previews" / f"{key}.png"


def _matplotlib_version() -> str:
    try:
        return importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _copy_atomic(source: Path, target: Path) -> bool:
    """`target` holds `source`'s bytes, whole or not at all; False when that could not be done."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


def _copy_stored(spec: dict[str, Any]) -> bool:
    stored = stored_preview(spec)
    return stored is not None and stored.is_file() and _copy_atomic(stored, Path(spec["path"]))


class ForkedDrawing:
    """The judge's view of a drawing process forked by a PlotServer, shaped like the `subprocess.Popen` it stands
    in for: stdin, `poll`, `communicate`, and a pid that leads its own process group. Its pipes are file objects,
    closed with it whatever happens to the process."""

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int, status: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[str] | None = os.fdopen(stdin, "w")
        self._status = os.fdopen(status, "rb", buffering=0)
        self._outputs = [os.fdopen(fd, "rb", buffering=0) for fd in (stdout, stderr)]
        self._read: dict[IO[bytes], list[bytes]] = {pipe: [] for pipe in self._outputs}  # until each one's end

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self._finish()
        return self.returncode

    def _finish(self) -> None:
        data = self._status.read(STATUS.size) or b""
        self.returncode = STATUS.unpack(data)[0] if len(data) == STATUS.size else -signal.SIGKILL
        self._status.close()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both outputs to their end and the exit status, as Popen's; TimeoutExpired when `timeout` runs out."""
        if self.stdin is not None:
            with contextlib.suppress(OSError):
                self.stdin.close()
            self.stdin = None
        deadline = None if timeout is None else time.monotonic() + timeout
        while (reading := [pipe for pipe in self._outputs if not pipe.closed]) or self.returncode is None:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise subprocess.TimeoutExpired("plotting process", timeout or 0)
            for ready in select.select(reading or [self._status], [], [], wait)[0]:
                if ready is self._status:
                    self._finish()
                elif chunk := ready.read(1 << 16):
                    self._read[ready].append(chunk)
                else:
                    ready.close()
        out, err = (b"".join(self._read[pipe]).decode("utf-8", "replace") for pipe in self._outputs)
        return out, err


class PlotServer:
    """A process that has imported matplotlib and drawn a figure once, and forks one drawing process per job, so
    that a batch (or a `watch`) pays for that once. Each job is still drawn in a process of its own, with the
    limits, that sees only its own specs; `spawn` is safe from several threads.

    It also remembers which file holds each figure drawn so far: a figure whose spec (lines, limits, labels) is
    the same as one drawn already, the preview beside a learner's plot whose limits are the reference's above all,
    is the same picture, and is copied rather than drawn again."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock, self._lock, self._ready, self._broken = ours, threading.Lock(), False, False
        self._files_lock = threading.Lock()
        self._drawn: dict[str, Path] = {}  # figure -> a file that holds it
        self._holds: dict[Path, str] = {}  # file -> the figure it holds
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "grader.outputs.figures", json.dumps(LIMITS), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                cwd=PACKAGE_PARENT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=drawing_environment(),
            )
        finally:
            theirs.close()

    def spawn(self) -> ForkedDrawing:
        """A fresh drawing process; OSError when the server cannot give one (the caller starts its own)."""
        pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, status
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]]
        try:
            with self._lock:
                if self._broken:
                    raise OSError("the plotting server has failed before")
                if not self._ready:
                    self._sock.settimeout(PLOT_TIMEOUT_S)
                    self._ready = self._sock.recv(5) == b"ready"
                if not self._ready:
                    raise OSError("the plotting server did not start")
                self._sock.sendmsg([b"job"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs))])
                data = self._sock.recv(STATUS.size, socket.MSG_WAITALL)
                if len(data) != STATUS.size:
                    raise OSError("the plotting server has gone")
        except (OSError, ValueError):
            self._broken = True  # every later job starts a process of its own at once, rather than wait again
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        return ForkedDrawing(STATUS.unpack(data)[0], *ours)

    def remember(self, spec: dict[str, Any]) -> None:
        """The figure of `spec` is drawn, in its path."""
        with self._files_lock:
            self._claim(Path(spec["path"]), _picture_key(spec))

    def forget(self, spec: dict[str, Any]) -> None:
        """`spec`'s path is about to be drawn again: what it holds is no longer known."""
        with self._files_lock:
            self._claim(Path(spec["path"]), None)

    def copy_drawn(self, spec: dict[str, Any]) -> bool:
        """Put the same figure drawn earlier in `spec`'s path, atomically; False when there is none to copy."""
        key, path = _picture_key(spec), Path(spec["path"])
        with self._files_lock:
            source = self._drawn.get(key)
            if source is None:
                return False
            tmp = path.with_name(f".{path.name}.tmp")
            try:
                shutil.copyfile(source, tmp)
                os.replace(tmp, path)
            except OSError:
                tmp.unlink(missing_ok=True)
                self._claim(path, None)
                return False
            self._claim(path, key)
            return True

    def _claim(self, path: Path, key: str | None) -> None:
        """`path` holds the figure of `key` from now on (None: something unknown), and nothing it held before."""
        before = self._holds.pop(path, None)
        if before is not None and self._drawn.get(before) == path:
            del self._drawn[before]
        if key is not None:
            self._holds[path], self._drawn[key] = key, path

    def close(self) -> None:
        """The server exits once the socket closes; drawing processes still running end with their jobs."""
        self._sock.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class PlotJob:
    """Draw one submission's plots in a child process while the checks go on.

    The child starts at once, so its matplotlib import overlaps the worker's start (a `server` forks it with
    matplotlib imported already; a `process` from `start_drawing` was started earlier still); `submit` hands it
    the series (the first call counts; later ones are ignored), `result` waits at most PLOT_TIMEOUT_S from then
    and returns the files drawn; `failures` says why any plot is missing. Neither ever raises.
    """

    def __init__(
        self,
        plots: list[PlotSpec],
        out_dir: Path,
        note: str = "",
        preview: dict[str, torch.Tensor] | None = None,
        tolerances: Mapping[str, Tolerance] | None = None,
        as_reference: bool = False,
        timeout_s: float = PLOT_TIMEOUT_S,
        server: PlotServer | None = None,
        process: subprocess.Popen[str] | None = None,
    ) -> None:
        self._plots, self._out_dir, self._note = plots, out_dir.resolve(), note
        self._preview, self._tolerances = preview, tolerances
        self._as_reference, self._timeout_s = as_reference, timeout_s
        self.failures: dict[str, str] = {}
        self._asked: list[str] = []
        self._payload: Path | None = None
        self._deadline: float | None = None
        self._written: list[str] | None = None
        self._process: subprocess.Popen[str] | ForkedDrawing | None = process
        self._server, self._copied, self._drawing = server, list[str](), list[dict[str, Any]]()
        self._start_error = ""
        if server is not None and self._process is None:
            with contextlib.suppress(OSError):
                self._process = server.spawn()
        if self._process is None:
            try:
                self._process = start_drawing()
            except OSError as exc:
                self._start_error = f"the plotting process could not start: {exc}"

    def submit(self, series: Mapping[str, torch.Tensor] | None) -> None:
        if self._deadline is not None:
            return
        self._deadline = time.monotonic() + self._timeout_s
        specs: list[dict[str, Any]] = []
        try:
            if series:
                specs, self.failures = figure_specs(
                    self._plots,
                    series,
                    self._out_dir,
                    self._note,
                    self._preview,
                    self._tolerances,
                    self._as_reference,
                )
        except Exception as exc:  # a plot the judge cannot prepare is a missing plot, not a grade
            self.failures = {plot.file: f"not prepared: {type(exc).__name__}: {exc}" for plot in self._plots}
        self._asked = [spec["file"] for spec in specs]
        for folder in {Path(spec["path"]).parent for spec in specs}:
            folder.mkdir(parents=True, exist_ok=True)
        server = self._server
        self._copied = [
            spec["file"] for spec in specs if (server is not None and server.copy_drawn(spec)) or _copy_stored(spec)
        ]
        self._drawing = [spec for spec in specs if spec["file"] not in self._copied]
        if server is not None:
            for spec in self._drawing:
                server.forget(spec)
        line = ""
        if self._drawing:
            fd, name = tempfile.mkstemp(prefix="paperleet-plots-", suffix=".json")
            with os.fdopen(fd, "w") as handle:
                json.dump({"figures": self._drawing}, handle)
            self._payload, line = Path(name), name
        self._send(line)

    def _send(self, line: str) -> None:
        if self._process is None or self._process.stdin is None:
            return
        try:
            self._process.stdin.write(line + "\n")  # a short line never fills the pipe: this cannot block
            self._process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the child is gone already; `result` says how

    def result(self) -> list[str]:
        """The learner-plot files drawn (previews beside them are not listed); at most PLOT_TIMEOUT_S of waiting."""
        if self._written is not None:
            return self._written
        if self._deadline is None:
            self.submit(None)
        assert self._deadline is not None
        outcome = self._wait(max(self._deadline - time.monotonic(), 0.5))
        self.close()
        # the learner's plots only: a preview beside one that failed leaves the problem's shared preview in place
        asked = [file for file in self._asked if file in {plot.file for plot in self._plots}]
        drawn = outcome.get("written", [])
        written = [*drawn, *self._copied]
        for spec in self._drawing:
            if spec["file"] in drawn:
                if self._server is not None:
                    self._server.remember(spec)
                if (stored := stored_preview(spec)) is not None:
                    _copy_atomic(Path(spec["path"]), stored)
        failed = outcome.get("failed", {})
        for file in asked:
            if file not in written:
                self.failures[file] = clean_line(failed.get(file) or outcome.get("error") or "not drawn", 300)
        self._written = [file for file in asked if file in written]
        return self._written

    def _wait(self, timeout: float) -> dict[str, Any]:
        if self._process is None:
            return {"error": self._start_error}
        try:
            out, err = self._process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            return {"error": f"not drawn within {self._timeout_s:g} s"}
        if self._process.returncode != 0 or not out.strip():
            code = self._process.returncode or 0
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
            return {"error": f"the plotting process ended with {how}: {clean_line(err.strip()[-200:])}"}
        try:
            outcome = json.loads(out.strip().splitlines()[-1])
        except ValueError:
            return {"error": "the plotting process answered something unreadable"}
        return outcome if isinstance(outcome, dict) else {"error": "the plotting process answered a non-object"}

    def _kill(self) -> None:
        """End the child if it is still there, then reap it and close its pipes, whether or not it had ended."""
        if self._process is None:
            return
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
        self._process.communicate()

    def close(self) -> None:
        """End the child if it is still there and remove the specs file; safe to call more than once."""
        self._kill()
        if self._payload is not None:
            self._payload.unlink(missing_ok=True)
            self._payload = None

    def notes(self) -> str:
        """The reasons plots are missing, in one sentence for the report."""
        if not self.failures:
            return ""
        return "Plots not drawn: " + "; ".join(f"{file} ({why})" for file, why in sorted(self.failures.items()))


def draw(
    plots: list[PlotSpec],
    series: Mapping[str, torch.Tensor],
    out_dir: Path,
    note: str = "",
    reference: bool = False,
    timeout_s: float = PLOT_TIMEOUT_S,
) -> list[str]:
    """Draw `series` and wait: every plot whose series are present and aligned; return the file names written.

    Specs label the learner's curves "your ..."; a `reference` preview labels the same curves "reference ...".
    """
    job = PlotJob(plots, out_dir, note, as_reference=reference, timeout_s=timeout_s)
    job.submit(series)
    return job.result()


def toy_failures(failures: dict[str, str]) -> str:
    """Why the plots of some toy parts are missing, in a few words: the parts whose run at the public seed gave no
    series (how each stopped is what the T3 checks say of the graded run, which stops the same way as a rule)."""
    if not failures:
        return ""
    parts = ", ".join(clean_line(part, 60) for part in sorted(failures))
    return f"No plot of the toy's {parts}: your functions stopped it (the T3 checks say how)."
