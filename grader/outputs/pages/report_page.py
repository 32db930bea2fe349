"""One submission's `report.html`: scores, every check, and each T3 plot beside the reference preview."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.model.problem import Problem
from grader.model.report import CheckResult, Report, TierResult, UnexplainedCases, round_score, write_atomic
from grader.model.verdicts import Status, Verdict
from grader.outputs.learner_view import learner_message
from grader.outputs.pages.markup import Markup, el, join, page, png_data_uri
from grader.outputs.pages.previews import PreviewSource, reference_previews
from grader.outputs.plots import preview_file


@dataclass(frozen=True)
class Figure:
    """One declared plot: the learner's PNG and the reference's, either possibly missing."""

    file: str
    title: str
    learner: bytes | None
    reference: bytes | None


def check_anchor(check_id: str) -> str:
    return f"check-{check_id}"


def score_text(score: float, max_score: float) -> str:
    return f"{round_score(score):g}/{round_score(max_score):g}"


def badge(kind: str, value: str) -> Markup:
    return el("span", value, class_=f"badge {kind}-{value}")


def _header(report: Report) -> Markup:
    isolation = report.isolation.level if report.isolation else "none"
    details = [
        ("problem", report.problem),
        ("status", badge("s", report.status)),
        ("seed", str(report.seed)),
        ("duration", f"{report.duration_s:.2f} s"),
        ("isolation", isolation),
        (
            "versions",
            f"python {report.versions.python} · torch {report.versions.torch} · grader {report.versions.grader}",
        ),
        ("sha256", report.submission_sha256),
        ("problem hash", report.problem_hash),
    ]
    return join(
        [
            el("h1", report.submission),
            el("p", el("span", score_text(report.score, report.max_score), class_="score"), " points", class_="sub"),
            el("dl", [[el("dt", name), el("dd", value)] for name, value in details], class_="meta"),
            el("p", el("strong", _message_label(report)), report.message, class_="alert") if report.message else "",
        ]
    )


def _message_label(report: Report) -> str:
    # a graded report's message only notes what is missing beside the grade (a plot that could not be drawn)
    if report.status == Status.REFUSED:
        return "Not graded. "
    return "Note. " if report.status == Status.GRADED else "Grading stopped early. "


def _tier_overview(tiers: list[TierResult]) -> Markup:
    rows = [
        el(
            "tr",
            el("td", el("a", t.tier, href=f"#tier-{t.tier}")),
            el("td", t.title),
            el("td", score_text(t.score, t.max_score), class_="num"),
            el("td", el("meter", min="0", max=f"{t.max_score:g}", value=f"{t.score:g}")),
        )
        for t in tiers
    ]
    head = el("tr", el("th", "tier"), el("th", "title"), el("th", "score", class_="num"), el("th", ""))
    return join([el("h2", "Tiers"), el("table", el("thead", head), el("tbody", rows), class_="tiers")])


# What a check's visibility tag means: when learners see its result on Gradescope (this page always shows it).
VISIBILITY_MEANING = {
    "after_published": "learners see its result once grades are published",
    "after_due_date": "learners see its result after the due date",
    "hidden": "learners never see its result",
}
# The tag beside such a check, in words: the spec's token (`after_published`) means nothing to a reader.
VISIBILITY_TAG = {"after_published": "after publishing", "after_due_date": "after the due date", "hidden": "hidden"}


def _summary(report: Report) -> Markup:
    """What failed, in a few lines at the top: each check that lost points, and the misreadings that explain them."""
    lost = [(tier.tier, c) for tier in report.tiers for c in tier.checks if c.verdict != Verdict.PASS]
    if report.status in (Status.IMPORT_ERROR, Status.IMPORT_TIMEOUT, Status.IMPORT_CRASHED):
        items = [el("li", "No check ran, because the file could not be imported (see the message above).")]
    elif report.status == Status.REFUSED:
        items = [el("li", "No check ran, because the file is not one the grader reads (see the message above).")]
    elif not lost:
        items = [el("li", "Every check passed.")]
    else:
        items = [
            el(
                "li",
                el("a", el("code", c.id), href=f"#{check_anchor(c.id)}"),
                f" ({tier}, {c.verdict}, {score_text(c.score, c.max_score)} points). {c.title.rstrip('.')}.",
            )
            for tier, c in lost
        ]
    diagnosis = [
        el(
            "p",
            el("strong", "Likely misreading: "),
            el("code", d.id),
            f". {d.explanation} It explains "
            f"{d.cases_explained} of the {d.cases_failing} failing cases, in {', '.join(d.checks)}; it is "
            f"charged in {', '.join(d.owners)}.",
            [" ", el("em", "A library's convention: "), d.convention] if d.convention else [],
            _unexplained_list(d.unexplained, "Left unexplained: "),
            class_="diagnosis",
        )
        for d in report.diagnosis
    ]
    # with no misreading named, only where the failures lie is worth a line: the list of symptoms follows anyway
    located = report.unexplained if report.diagnosis else [entry for entry in report.unexplained if entry.features]
    if located:
        diagnosis.append(el("p", _unexplained_list(located, "Explained by no misreading: "), class_="sub"))
    if report.diagnosis and report.follow_through:
        diagnosis.append(
            el(
                "p",
                "Cases a misreading explains earn their points in the checks that do not own it "
                "(follow-through credit); the checks it owns charge it.",
                class_="sub",
            )
        )
    return el(
        "section",
        el("h2", "What failed" if lost else "Summary"),
        diagnosis,
        el("ul", items),
        class_="summary",
        id="summary",
    )


def _unexplained_list(cases: list[UnexplainedCases], lead: str) -> list[Markup | str]:
    """By check, the failing cases left unexplained: visible ones by label, hidden ones counted, and what separates
    them; nothing when there are none."""
    if not cases:
        return []
    return [" ", el("span", lead, "; ".join(entry.describe() for entry in cases), ".", class_="unexplained")]


def _visibility_note(report: Report) -> Markup:
    shown = sorted({c.visibility for c in report.checks() if c.visibility in VISIBILITY_MEANING})
    if not shown:
        return Markup("")
    return el(
        "p",
        [[el("span", VISIBILITY_TAG[v], class_="tag"), f" {VISIBILITY_MEANING[v]}; "] for v in shown],
        "this page shows every result.",
        class_="sub",
    )


def _check_row(check: CheckResult) -> Markup:
    cases = f"{check.cases_passed}/{check.cases_total}" if check.cases_total else ""
    meaning = VISIBILITY_MEANING.get(check.visibility, "")
    tag = VISIBILITY_TAG.get(check.visibility, check.visibility)
    hidden = el("span", tag, class_="tag", title=meaning) if check.visibility != "visible" else ""
    return el(
        "tr",
        el("td", el("code", check.id), " ", hidden, el("div", check.title, class_="sub")),
        el("td", badge("v", check.verdict)),
        el("td", score_text(check.score, check.max_score), class_="num"),
        el("td", cases, class_="num"),
        # the learner's sentence: a hidden case's or a grading seed's evidence stays in report.json, for instructors
        el("td", el("pre", learner_message(check))),
        id=check_anchor(check.id),
        data_verdict=check.verdict,
    )


def _tier_checks(tier: TierResult) -> Markup:
    head = el(
        "tr",
        el("th", "check"),
        el("th", "verdict"),
        el("th", "score", class_="num"),
        el("th", "cases", class_="num"),
        el("th", "message"),
    )
    return join(
        [
            el("h3", f"{tier.tier} · {tier.title} · {score_text(tier.score, tier.max_score)}", id=f"tier-{tier.tier}"),
            el("table", el("thead", head), el("tbody", [_check_row(c) for c in tier.checks]), class_="checks"),
        ]
    )


def _image(data: bytes | None, caption: str, alt: str, missing: str) -> Markup:
    body = el("img", src=png_data_uri(data), alt=alt) if data else el("div", missing, class_="placeholder")
    return el("figure", el("figcaption", caption), body)


LEARNER_MISSING = "Not drawn: your functions did not give the series this plot needs; the T3 checks above say why."
REFERENCE_MISSING = "No reference preview is available for this plot."


def _figure_pair(figure: Figure) -> Markup:
    return join(
        [
            el("h3", figure.title),
            el(
                "div",
                _image(
                    figure.learner,
                    "your functions, at this grade's seed",
                    f"{figure.title}: your functions",
                    LEARNER_MISSING,
                ),
                _image(
                    figure.reference,
                    "reference preview, public seed",
                    f"{figure.title}: reference preview",
                    REFERENCE_MISSING,
                ),
                class_="pair",
                data_plot=figure.file,
            ),
        ]
    )


def _plots(figures: list[Figure]) -> Markup:
    if not figures:
        return Markup("")
    return join([el("h2", "Plots: yours beside the reference", id="plots"), [_figure_pair(f) for f in figures]])


def _output(report: Report) -> Markup:
    streams = [(name, text) for name, text in (("stdout", report.stdout), ("stderr", report.stderr)) if text]
    if not streams:
        return Markup("")
    return join(
        [
            el("h2", "Output of your program"),
            [
                el("details", el("summary", f"{name} ({len(text)} characters)"), el("pre", text))
                for name, text in streams
            ],
        ]
    )


def render_report_page(report: Report, figures: list[Figure]) -> str:
    body = join(
        [
            _header(report),
            _summary(report),
            _tier_overview(report.tiers),
            el("h2", "Checks"),
            _visibility_note(report),
            [_tier_checks(t) for t in report.tiers],
            _plots(figures),
            _output(report),
            el("h2", "Reproduce this grade"),
            el("pre", el("code", report.command), class_="command"),
        ]
    )
    title = f"{report.submission} · {report.problem} · {score_text(report.score, report.max_score)}"
    return page(title, body)


def _learner_png(report: Report, out_dir: Path, file: str) -> bytes | None:
    path = out_dir / file
    return path.read_bytes() if file in report.artifacts and path.is_file() else None


def _preview_png(report: Report, out_dir: Path, file: str, shared: dict[str, bytes | None]) -> bytes | None:
    """The preview drawn beside this submission's plot with the same limits, else the problem's own preview."""
    beside = out_dir / preview_file(file)
    return beside.read_bytes() if file in report.artifacts and beside.is_file() else shared.get(file)


def collect_figures(problem: Problem, report: Report, out_dir: Path, previews: PreviewSource) -> list[Figure]:
    if not problem.spec.plots:
        return []
    references = reference_previews(problem, previews)
    return [
        Figure(
            plot.file,
            plot.title,
            _learner_png(report, out_dir, plot.file),
            _preview_png(report, out_dir, plot.file, references),
        )
        for plot in problem.spec.plots
    ]


def write_report_page(problem: Problem, report: Report, out_dir: Path, previews: PreviewSource) -> Path:
    """Write `report.html` beside `report.json`; everything it shows is inside the one file."""
    path = out_dir / "report.html"
    write_atomic(path, render_report_page(report, collect_figures(problem, report, out_dir, previews)))
    return path
