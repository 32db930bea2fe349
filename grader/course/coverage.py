"""Which lines and branches of a problem's reference no case reaches: every `raise` and every branch of the
contract must be exercised by some case, or a solution can get that clause wrong and lose nothing."""

from __future__ import annotations

import json
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from grader.judge.cases import generator_for
from grader.judge.expectations import single_threaded
from grader.model.problem import Problem, load_module
from grader.worker import protocol


@dataclass(frozen=True)
class Coverage:
    """What the cases of every grading seed leave unreached in reference.py."""

    path: Path
    missing_lines: tuple[int, ...]
    missing_branches: tuple[tuple[int, int], ...]  # (from line, to line); a negative line leaves the function

    @property
    def complete(self) -> bool:
        return not self.missing_lines and not self.missing_branches

    def describe(self) -> str:
        parts = [f"line {n}" for n in self.missing_lines]
        parts += [f"branch {a}->{'exit' if b < 0 else b}" for a, b in self.missing_branches]
        return ", ".join(parts)


def reference_coverage(problem: Problem) -> Coverage:
    """Line and branch coverage of reference.py under every case of every check, at every grading seed. The
    module is loaded afresh while measuring, so its top level counts as reached as it is."""
    import coverage  # an instructor's command only: grading never needs it

    path = problem.reference_dir / "reference.py"
    names = sorted({check.cases for check in problem.spec.checks if check.cases})
    measure = coverage.Coverage(branch=True, include=[str(path)], data_file=None)
    with single_threaded(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        measure.start()
        try:
            module = load_module(f"paperleet_coverage_{problem.id}", path)
            for seed in problem.grading_seeds:
                for name in names:
                    for call in problem.case_generator(name)(generator_for(seed, name)):
                        function = getattr(module, call.function)
                        protocol.observe_call(function, call.kwargs, list(call.requires_grad), call.backward)
        finally:
            measure.stop()
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "coverage.json"
        measure.json_report(outfile=str(out))
        files = json.loads(out.read_text())["files"]
    (measured,) = files.values()
    return Coverage(
        path,
        tuple(measured["missing_lines"]),
        tuple((int(a), int(b)) for a, b in measured.get("missing_branches", [])),
    )
