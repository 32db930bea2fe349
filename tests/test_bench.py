"""`make bench`'s classes: the mixed one is mostly wrong files, none of them alike."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from conftest import ROOT

from grader.bench import diagnosis_time, mixed_sources, write_class
from grader.model.problem import Problem

PROBLEM = "glm5_offpolicy"
REFERENCE = ROOT / "reference" / PROBLEM / "reference.py"


def test_the_mixed_class_is_a_correct_file_three_misreadings_and_the_starter() -> None:
    sources = mixed_sources(PROBLEM, REFERENCE)
    declared = [m.solution for m in Problem(PROBLEM).misconceptions][:3]
    assert sources[0] == REFERENCE
    assert [p.name for p in sources[1:4]] == declared
    assert sources[4] == ROOT / "problems" / PROBLEM / "starter.py"


def test_every_file_of_the_class_is_unique_and_still_its_source(tmp_path: Path) -> None:
    sources = mixed_sources(PROBLEM, REFERENCE)
    write_class(sources, 12, tmp_path / "class")
    files = sorted((tmp_path / "class").iterdir())
    assert len(files) == 12
    assert len({hashlib.sha256(f.read_bytes()).hexdigest() for f in files}) == 12
    for index, file in enumerate(files):
        assert file.read_text().startswith(sources[index % len(sources)].read_text())


def test_the_diagnosis_time_of_a_class_sums_its_reports_phases(tmp_path: Path) -> None:
    for name, phases, duration in (("a", {"diagnosis": 0.25, "T1": 1.0}, 2.0), ("b", {"T1": 0.5}, 1.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps({"phases": phases, "duration_s": duration}))
    (tmp_path / "summary.json").write_text(json.dumps({"phases": {"diagnosis": 9.0}, "duration_s": 9.0}))
    assert diagnosis_time(tmp_path) == (0.25, 3.5)  # a file of another name is not a report
