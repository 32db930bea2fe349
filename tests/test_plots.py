"""The plotting server: each job drawn in a process forked for it alone, with the limits; nothing outlives close."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from grader.model.problem import Problem
from grader.model.spec import PlotSpec
from grader.outputs import figures
from grader.outputs.plots import (
    ForkedDrawing,
    PlotJob,
    PlotServer,
    figure_specs,
    preview_file,
    series_tolerances,
    stored_preview,
)


def _series(problem: Problem) -> dict[str, torch.Tensor]:
    names = {plot.x for plot in problem.spec.plots} | {line.y for plot in problem.spec.plots for line in plot.lines}
    return {name: torch.linspace(0, 1, 33, dtype=torch.float64) for name in sorted(names)}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.e2e
def test_jobs_forked_by_the_server_draw_what_a_job_of_its_own_draws(problem: Problem, tmp_path: Path) -> None:
    series = _series(problem)
    files = [plot.file for plot in problem.spec.plots]
    alone = PlotJob(problem.spec.plots, tmp_path / "alone", preview=series)
    alone.submit(series)
    assert alone.result() == files, alone.failures
    server = PlotServer()
    drawers = []
    try:
        for index in range(2):
            job = PlotJob(problem.spec.plots, tmp_path / str(index), preview=series, server=server)
            assert isinstance(job._process, ForkedDrawing)
            drawers.append(job._process.pid)
            job.submit(series)
            assert job.result() == files, job.failures
            assert all((tmp_path / str(index) / preview_file(file)).is_file() for file in files)
        assert drawers[0] != drawers[1] and server.process.pid not in drawers, "one process per job"
    finally:
        server.close()
    assert server.process.returncode == 0
    assert not any(_alive(pid) for pid in drawers)


@pytest.mark.e2e
def test_a_job_over_its_time_is_killed_and_the_next_one_still_draws(problem: Problem, tmp_path: Path) -> None:
    series = _series(problem)
    server = PlotServer()
    try:
        slow = PlotJob(problem.spec.plots, tmp_path / "slow", server=server, timeout_s=0.01)
        assert isinstance(slow._process, ForkedDrawing)
        os.kill(slow._process.pid, signal.SIGSTOP)  # a drawing that does not end, however fast the process
        slow.submit(series)
        assert slow.result() == [] and all("not drawn within" in why for why in slow.failures.values())
        assert slow._process.returncode == -signal.SIGKILL
        assert not _alive(slow._process.pid)
        job = PlotJob(problem.spec.plots, tmp_path / "next", server=server)
        job.submit(series)
        assert job.result() == [plot.file for plot in problem.spec.plots], job.failures
    finally:
        server.close()


@pytest.mark.e2e
def test_a_job_falls_back_to_a_process_of_its_own_when_the_server_is_gone(problem: Problem, tmp_path: Path) -> None:
    server = PlotServer()
    os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait()
    started = time.monotonic()
    job = PlotJob(problem.spec.plots, tmp_path, server=server)
    assert not isinstance(job._process, ForkedDrawing)
    job.submit(_series(problem))
    assert job.result() == [plot.file for plot in problem.spec.plots], job.failures
    assert time.monotonic() - started < 30
    server.close()


@pytest.mark.e2e
def test_a_figure_drawn_before_is_copied_and_a_file_drawn_over_is_never_a_source(
    problem: Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAPERLEET_CACHE", str(tmp_path / "cache"))  # no preview kept by an earlier run
    series = _series(problem)
    other = {name: value.flip(0) for name, value in series.items()}
    files = [plot.file for plot in problem.spec.plots]
    server = PlotServer()

    def draw(folder: str, drawn: dict[str, torch.Tensor]) -> PlotJob:
        job = PlotJob(problem.spec.plots, tmp_path / folder, preview=series, server=server)
        job.submit(drawn)
        assert job.result() == files, job.failures
        return job

    try:
        first = draw("a", series)
        assert not first._copied
        again = draw("b", series)
        assert sorted(again._copied) == sorted([*files, *map(preview_file, files)])
        assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in again._copied)
        draw("a", other)  # "a" now holds other pictures: a copy of the first ones must come from "b"
        draw("b", other)
        third = draw("c", series)
        # the previews beside keep their limits (flipped series span the same values): those are the same pictures
        assert sorted(third._copied) == sorted(map(preview_file, files)), "copied from a file that holds another one"
        assert (tmp_path / "c" / files[0]).read_bytes() != (tmp_path / "a" / files[0]).read_bytes()
    finally:
        server.close()


def test_each_curve_is_marked_where_it_misses_even_where_another_curve_misses_too(tmp_path: Path) -> None:
    """routed_gates' shift_sweep.png: the replayed curve (the second) sits 0.3 decades off its reference; its
    misses are marked on it, in its colour, with a legend entry of their own, and so are the first curve's where
    both miss at one x."""
    routed = Problem("routed_gates")
    (plot,) = [plot for plot in routed.spec.plots if plot.file == "shift_sweep.png"]
    x = torch.linspace(-6, -1, 11, dtype=torch.float64)
    reference = {plot.x: x, **{line.y: x * (index + 1) for index, line in enumerate(plot.lines)}}
    first, second = plot.lines[0].y, plot.lines[1].y
    mine = {name: value.clone() for name, value in reference.items()}
    mine[second] = mine[second] + 0.3
    mine[first][4] = mine[first][4] + 1.0  # both curves miss at x[4]
    specs, failures = figure_specs([plot], mine, tmp_path, "", reference, series_tolerances(routed.spec.checks))
    assert not failures
    learner = specs[0]
    marked = {marks["line"]: marks for marks in learner["marks"]}
    assert set(marked) == {0, 1}
    assert marked[1]["x"] == x.tolist() and marked[1]["y"] == mine[second].tolist()  # on the curve that misses
    assert marked[0]["x"] == [x[4].item()] and marked[0]["y"] == [mine[first][4].item()]
    assert plot.lines[1].label in marked[1]["label"] and plot.lines[0].label in marked[0]["label"]
    figure = figures.figure_of(learner)
    legend = [text.get_text() for legend in figure.legends for text in legend.get_texts()]
    assert marked[0]["label"] in legend and marked[1]["label"] in legend
    drawn = {line.get_label(): line for line in figure.axes[0].get_lines()}
    curve = drawn[learner["lines"][1]["label"]]
    assert drawn[marked[1]["label"]].get_markerfacecolor() == curve.get_color()
    figures.draw_figure(learner)
    assert (tmp_path / plot.file).stat().st_size > 0


def test_a_plot_that_counts_batches_has_whole_number_ticks() -> None:
    weights = Problem("behavior_weights")
    (plot,) = [plot for plot in weights.spec.plots if plot.file == "bf16_on_bound.png"]
    assert plot.integer_x
    series = {plot.x: torch.arange(1, 21, dtype=torch.float64)}
    series |= {line.y: torch.rand(20, dtype=torch.float64) for line in plot.lines}
    (spec,), _ = figure_specs([plot], series, Path("/nowhere"), as_reference=True)
    axes = figures.figure_of(spec).axes[0]
    ticks = [tick for tick in axes.get_xticks() if spec["xlim"][0] <= tick <= spec["xlim"][1]]
    assert len(ticks) >= 3 and all(float(tick).is_integer() for tick in ticks), ticks


def test_a_route_profile_spans_where_its_curves_differ_not_the_whole_sweep() -> None:
    routed = Problem("routed_gates")
    (plot,) = [plot for plot in routed.spec.plots if plot.file == "route_profile.png"]
    x = torch.linspace(-2, 2, 2001, dtype=torch.float64)
    series = {name: torch.zeros_like(x) for name in [plot.x, *(line.y for line in plot.lines)]}
    series[plot.x] = x
    differ = (x >= 0.1) & (x <= 0.2)
    series[plot.zoom_to_differences[0]] = torch.where(differ, -0.5, -3.0) + 0.0 * x
    series[plot.zoom_to_differences[1]] = torch.full_like(x, -3.0)
    learner, preview = figure_specs([plot], series, Path("/nowhere"), preview=series)[0]
    lo, hi = learner["xlim"]
    assert learner["xlim"] == preview["xlim"]
    assert lo <= 0.1 and hi >= 0.2, "every point where the curves differ is on the axes"
    assert hi - lo < 0.5, f"{lo}..{hi}: the axis spends its width on the range where they agree"
    assert learner["ylim"][1] > -0.5  # the difference is on the axes, not cut off


def test_a_zoom_must_name_series_the_plot_draws() -> None:
    routed = Problem("routed_gates")
    data = routed.spec.plots[0].model_dump()
    with pytest.raises(ValueError, match="not its lines' series"):
        PlotSpec.model_validate({**data, "zoom_to_differences": ["no_such_series", data["lines"][0]["y"]]})


@pytest.mark.e2e
def test_a_preview_drawn_once_is_copied_by_later_jobs_and_the_learners_plot_is_drawn_again(
    problem: Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAPERLEET_CACHE", str(tmp_path / "cache"))
    series = _series(problem)
    files = [plot.file for plot in problem.spec.plots]
    first = PlotJob(problem.spec.plots, tmp_path / "first", preview=series)
    first.submit(series)
    assert first.result() == files, first.failures
    specs, _ = figure_specs(problem.spec.plots, series, tmp_path / "second", preview=series)
    stored = {spec["file"]: stored_preview(spec) for spec in specs}
    assert all(stored[file] is None for file in files), "a learner's own figure is never kept"
    kept = [path for file, path in stored.items() if path is not None]
    assert len(kept) == len(files) and all(path.is_file() for path in kept)
    for path in kept:
        path.write_bytes(b"kept picture")  # so that a copy can be told from a drawing
    second = PlotJob(problem.spec.plots, tmp_path / "second", preview=series)
    second.submit(series)
    assert second.result() == files, second.failures
    for file in files:
        assert (tmp_path / "second" / preview_file(file)).read_bytes() == b"kept picture"
        assert (tmp_path / "second" / file).read_bytes().startswith(b"\x89PNG")
