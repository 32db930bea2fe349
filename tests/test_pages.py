"""The HTML pages: learner text escaped, images embedded, links relative, nothing fetched from outside."""

from __future__ import annotations

import base64
import hashlib
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import MARKUP, PROBLEM, Batch

from grader.judge.expectations import Expectations
from grader.model.problem import Problem
from grader.model.report import Report
from grader.model.verdicts import Status
from grader.outputs.pages import Figure, render_dashboard, render_report_page, write_dashboard
from grader.outputs.pages.dashboard import Row, report_link
from grader.outputs.pages.markup import CSS
from grader.outputs.pages.previews import PreviewSource, reference_previews
from grader.outputs.pages.report_page import collect_figures
from grader.outputs.plots import preview_file
from grader.text import submission_folder

PAYLOAD = MARKUP
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)  # a 1x1 image


class Page(HTMLParser):
    """The parsed page: every start tag with its attributes, the text, and each script's and style's source."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.raw: dict[str, list[str]] = {"script": [], "style": []}
        self._inside: str | None = None
        self.feed(source)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {name: value or "" for name, value in attrs}))
        if tag in self.raw:
            self._inside = tag
            self.raw[tag].append("")

    def handle_endtag(self, tag: str) -> None:
        self._inside = None if tag == self._inside else self._inside

    def handle_data(self, data: str) -> None:
        if self._inside:
            self.raw[self._inside][-1] += data
        else:
            self.text.append(data)

    def all(self, tag: str) -> list[dict[str, str]]:
        return [attrs for name, attrs in self.tags if name == tag]

    @property
    def body_text(self) -> str:
        return "".join(self.text)


def check(check_id: str, verdict: str, message: str, score: float = 0.0) -> dict[str, Any]:
    return {
        "id": check_id,
        "title": f"title of {check_id}",
        "verdict": verdict,
        "score": score,
        "max_score": 2.0,
        "message": message,
        "learner_message": message,  # a visible case: the learner reads the instructor's sentence
        "duration_s": 0.01,
        "cases_passed": 0,
        "cases_total": 3,
    }


def make_report(
    submission: str = "mallory.py", score: float = 2.0, text: str = PAYLOAD, artifacts: tuple[str, ...] = ()
) -> Report:
    tiers = [
        {
            "tier": "T0",
            "title": "Contracts",
            "score": 2.0,
            "max_score": 4.0,
            "checks": [check("signatures", "pass", "all 2 cases passed", 2.0), check("contract", "error", text)],
        },
        {
            "tier": "T3",
            "title": "Toy experiment",
            "score": 0.0,
            "max_score": 2.0,
            "checks": [check("sweep", "fail", text)],
        },
    ]
    return Report.model_validate(
        {
            "problem": "demo",
            "submission": submission,
            "submission_sha256": "0" * 64,
            "status": "graded",
            "score": score,
            "max_score": 6.0,
            "tiers": tiers,
            "artifacts": list(artifacts),
            "seed": 7,
            "versions": {"python": "3.11", "torch": "2", "grader": "0.1"},
            "problem_hash": "f" * 64,
            "command": f"python -m grader grade {submission} --problem demo --seed 7",
            "stdout": text,
            "stderr": text,
            "message": text,
        }
    )


def csp(page: Page) -> dict[str, str]:
    policy = next(m["content"] for m in page.all("meta") if m.get("http-equiv") == "Content-Security-Policy")
    return {part.split()[0]: part.split(maxsplit=1)[1] for part in policy.split(";") if part.strip()}


def sha256_source(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


def assert_safe(source: str, scripts: int) -> Page:
    """No tag, attribute or script came from learner text, and nothing can be fetched from outside."""
    page = Page(source)
    assert PAYLOAD not in source
    assert len(page.all("script")) == scripts
    for tag, attrs in page.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        for name in ("src", "href"):
            url = attrs.get(name, "")
            assert not re.match(r"^([a-z]+:|//)", url) or url.startswith("data:image/png;base64,"), url
    policy = csp(page)
    assert policy["default-src"] == "'none'" and policy["img-src"] == "data:"
    assert policy["style-src"] == " ".join(sha256_source(style) for style in page.raw["style"])
    assert policy["script-src"] == (" ".join(sha256_source(s) for s in page.raw["script"]) or "'none'")
    return page


def test_report_page_escapes_learner_text() -> None:
    page = assert_safe(render_report_page(make_report(), []), scripts=0)
    assert page.body_text.count(PAYLOAD) == 5  # two check messages, stdout, stderr, the report message


def test_report_page_shows_the_learner_sentence_of_hidden_evidence() -> None:
    """A hidden case's or a grading seed's evidence stays in report.json: the page shows what a learner reads."""
    report = make_report(text="x")
    sweep = report.tiers[1].checks[0]
    sweep.message = "First failure, case 'sweep': sweep[8]: expected 0.390625, got 1"
    sweep.learner_message = "First failure, case 'sweep': sweep[8]: above the reference's value"
    text = Page(render_report_page(report, [])).body_text
    assert "above the reference's value" in text and "0.390625" not in text


def test_dashboard_escapes_learner_text_and_file_names() -> None:
    name = '<img src=x onerror="alert(1)">.py'
    source = render_dashboard([Row(make_report(name), report_link(make_report(name)))])
    page = assert_safe(source, scripts=1)
    assert name in page.body_text and "sweep" in page.body_text  # the failed check, by id; messages stay out


def test_report_page_embeds_both_images_and_marks_missing_ones() -> None:
    figures = [Figure("a.png", "Plot A", PNG, PNG[::-1]), Figure("b.png", "Plot B", None, None)]
    page = Page(render_report_page(make_report(artifacts=("a.png",)), figures))
    sources = [img["src"] for img in page.all("img")]
    assert [base64.b64decode(s.removeprefix("data:image/png;base64,")) for s in sources] == [PNG, PNG[::-1]]
    assert "Not drawn: your functions did not give the series" in page.body_text
    assert "No reference preview is available" in page.body_text


def test_report_page_shows_checks_scores_and_the_command() -> None:
    report = make_report(text="expected 0, got 1.2")
    page = Page(render_report_page(report, []))
    rows = [attrs for tag, attrs in page.tags if tag == "tr" and attrs.get("id", "").startswith("check-")]
    assert [(r["id"], r["data-verdict"]) for r in rows] == [
        ("check-signatures", "pass"),
        ("check-contract", "error"),
        ("check-sweep", "fail"),
    ]
    assert "2/6" in page.body_text and report.command in page.body_text


def test_dashboard_rows_link_to_each_report_and_failed_checks_to_their_rows() -> None:
    reports = [make_report("b b.py", 6.0, "ok"), make_report("a.py", 2.0, "no")]
    page = Page(render_dashboard([Row(r, report_link(r)) for r in reports]))
    links = [a["href"] for a in page.all("a")]
    spaced = submission_folder("b b.py")  # a name with a space gets a folder of safe characters
    assert links[:2] == [f"{spaced}/report.html", "a/report.html"]
    assert "a/report.html#check-contract" in links and f"{spaced}/report.html#check-sweep" in links
    assert {a.get("data-type") for a in page.all("th")} >= {"number"}
    bins = {g["data-bin"]: int(g["data-count"]) for g in page.all("g")}
    assert bins["3"] == 1 and bins["9"] == 1 and sum(bins.values()) == 2  # 33 % and 100 %


def test_the_dashboard_links_to_the_folders_the_reports_were_written_to(tmp_path: Path) -> None:
    # two undecodable names sanitize alike: only the folders they were written to tell them apart
    reports = [make_report(os.fsdecode(name), 2.0, "x") for name in (b"\xff.py", b"\xfe.py")]
    folders = [submission_folder(os.fsdecode(name)) for name in (b"\xff.py", b"\xfe.py")]
    page = Page(write_dashboard(reports, tmp_path, folders).read_text(encoding="utf-8"))
    assert {a["href"] for a in page.all("a") if "#" not in a["href"]} == {f"{f}/report.html" for f in folders}
    assert len(set(folders)) == 2 and reports[0].submission == reports[1].submission == "\N{REPLACEMENT CHARACTER}.py"


def test_a_graded_reports_note_is_not_called_an_early_stop() -> None:
    report = make_report(text="x").model_copy(update={"message": "Plots not drawn: a.png (not drawn within 20 s)"})
    graded = Page(render_report_page(report, [])).body_text
    assert "Plots not drawn" in graded and "stopped early" not in graded
    stopped = report.model_copy(update={"status": Status.BUDGET_EXCEEDED})
    assert "stopped early" in Page(render_report_page(stopped, [])).body_text


def test_the_preview_drawn_beside_a_plot_is_preferred_to_the_shared_one(tmp_path: Path) -> None:
    problem = Problem(PROBLEM)
    first = problem.spec.plots[0].file
    (tmp_path / first).write_bytes(PNG)
    (tmp_path / preview_file(first)).parent.mkdir()
    (tmp_path / preview_file(first)).write_bytes(PNG[::-1])
    shared = tmp_path / "problem_previews"
    shared.mkdir()
    for plot in problem.spec.plots:
        (shared / plot.file).write_bytes(b"shared")
    figures = collect_figures(problem, make_report(artifacts=(first,)), tmp_path, PreviewSource(shared, _unasked))
    assert (figures[0].learner, figures[0].reference) == (PNG, PNG[::-1])
    assert all(figure.reference == b"shared" for figure in figures[1:])


def test_plot_pairs_stack_on_narrow_screens() -> None:
    assert re.search(r"@media \(max-width: \d+px\) \{ \.pair \{ grid-template-columns: 1fr; \} \}", CSS)


@pytest.mark.e2e
def test_missing_previews_are_drawn_from_the_reference(tmp_path: Path) -> None:
    problem = Problem(PROBLEM)

    def series() -> dict[str, torch.Tensor]:
        return Expectations(problem, problem.spec.public_seed).series()

    drawn = reference_previews(problem, PreviewSource(tmp_path / "absent", series))
    assert set(drawn) == {plot.file for plot in problem.spec.plots}
    assert all(data and data.startswith(b"\x89PNG") for data in drawn.values())
    first = problem.spec.plots[0].file
    (tmp_path / first).write_bytes(PNG)
    assert reference_previews(problem, PreviewSource(tmp_path, series))[first] == PNG


def _unasked() -> dict[str, torch.Tensor]:
    raise AssertionError("the reference's series were asked for although every preview was in the folder")


def test_complete_previews_never_ask_for_the_reference_series(tmp_path: Path) -> None:
    problem = Problem(PROBLEM)
    for plot in problem.spec.plots:
        (tmp_path / plot.file).write_bytes(PNG)
    assert reference_previews(problem, PreviewSource(tmp_path, _unasked)) == {p.file: PNG for p in problem.spec.plots}


def test_grade_writes_a_safe_page_for_a_hostile_submission(markup_page: Path) -> None:
    report = Report.model_validate_json((markup_page / "report.json").read_text())
    assert PAYLOAD in report.stdout and any(PAYLOAD in c.message for c in report.checks())
    page = assert_safe((markup_page / "report.html").read_text(), scripts=0)
    assert page.body_text.count(PAYLOAD) >= 3


def test_grade_all_writes_the_dashboard_and_a_page_per_report(submission_batch: Batch) -> None:
    out = submission_batch.out
    assert (out / "index.html").is_file(), submission_batch.result.stdout[-3000:] + submission_batch.result.stderr
    page = assert_safe((out / "index.html").read_text(), scripts=1)
    rows = [attrs["data-submission"] for tag, attrs in page.tags if tag == "tr" and "data-submission" in attrs]
    assert rows == sorted(report["submission"] for report in submission_batch.reports.values())
    for link in {a["href"].split("#")[0] for a in page.all("a")}:
        assert (out / link).is_file(), link
    for stem, report in submission_batch.reports.items():
        images = Page((out / stem / "report.html").read_text()).all("img")
        assert len(images) == len(report["artifacts"]) + len(Problem(PROBLEM).spec.plots)  # every preview drawn


def test_grade_all_shows_progress_and_ends_with_the_class_table(submission_batch: Batch) -> None:
    output = submission_batch.result.stdout
    total = len(submission_batch.reports)
    assert f"{total}/{total}" in output and "elapsed" in output
    assert output.index("elapsed") < output.index("submissions") < output.index("dashboard:")


def test_a_visibility_tag_reads_as_words_not_the_spec_token() -> None:
    report = make_report(text="plain")
    report.tiers[1].checks[0].visibility = "after_published"
    page = render_report_page(report, [])
    text = re.sub(r"<[^>]+>", " ", page)
    assert "after_published" not in text
    assert "after publishing" in text and "learners see its result once grades are published" in page
