"""The class dashboard `index.html`: a sortable table of submissions, a score histogram, the most failed checks."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from grader.model.report import Report, write_atomic
from grader.model.spec import TIERS
from grader.model.verdicts import Verdict
from grader.outputs.pages.markup import Markup, el, join, page
from grader.outputs.pages.report_page import badge, check_anchor, score_text
from grader.text import submission_folder

BINS = 10  # histogram bars of 10 % of the maximum score each

# Sorts every `table.sortable` by the clicked header; cells may carry `data-sort`, numeric headers `data-type`.
SORT_SCRIPT = """
"use strict";
function sortTable(table, th) {
  const column = th.cellIndex;
  const ascending = th.getAttribute("aria-sort") !== "ascending";
  const numeric = th.dataset.type === "number";
  const key = (row) => {
    const cell = row.cells[column];
    const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    return numeric ? parseFloat(raw) : raw.toLowerCase();
  };
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
  });
  body.append(...rows);
  for (const other of th.parentNode.cells) other.removeAttribute("aria-sort");
  th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
}
for (const table of document.querySelectorAll("table.sortable")) {
  for (const th of table.tHead.rows[0].cells) {
    th.tabIndex = 0;
    th.addEventListener("click", () => sortTable(table, th));
    th.addEventListener("keydown", (event) => { if (event.key === "Enter") sortTable(table, th); });
  }
}
"""


@dataclass(frozen=True)
class Row:
    """One submission as the dashboard shows it; `link` is relative to the dashboard's folder."""

    report: Report
    link: str


def report_link(report: Report, folder: str | None = None) -> str:
    """`<folder>/report.html`: the folder grade-all wrote the submission's pages to, by default the one it names
    after the submission's file."""
    return f"{quote(folder or submission_folder(report.submission))}/report.html"


def percent(report: Report) -> float:
    return 100.0 * report.score / report.max_score if report.max_score else 0.0


def _submissions_table(rows: list[Row]) -> Markup:
    numeric = ["score", *TIERS, "duration s"]
    head = el(
        "tr",
        el("th", "submission", aria_sort="ascending"),
        el("th", "status"),
        [el("th", name, class_="num", data_type="number") for name in numeric],
    )
    body = []
    for row in rows:
        r = row.report
        tiers = {t.tier: t for t in r.tiers}
        cells = [
            el(
                "td",
                f"{tiers[t].score:g}" if t in tiers else "-",
                class_="num",
                data_sort=f"{tiers[t].score:g}" if t in tiers else "-1",
            )
            for t in TIERS
        ]
        body.append(
            el(
                "tr",
                el("td", el("a", r.submission, href=row.link)),
                el("td", badge("s", r.status), data_sort=r.status),
                el("td", score_text(r.score, r.max_score), class_="num", data_sort=f"{r.score:g}"),
                cells,
                el("td", f"{r.duration_s:.1f}", class_="num", data_sort=f"{r.duration_s:g}"),
                data_submission=r.submission,
            )
        )
    return el("table", el("thead", head), el("tbody", body), class_="sortable", id="submissions")


def _bin_of(report: Report) -> int:
    return min(BINS - 1, int(percent(report) // (100 / BINS)))


def _histogram(reports: list[Report]) -> Markup:
    """Inline SVG: how many submissions scored in each tenth of the maximum."""
    counts = [0] * BINS
    names: list[list[str]] = [[] for _ in range(BINS)]
    for r in reports:
        counts[_bin_of(r)] += 1
        names[_bin_of(r)].append(r.submission)
    width, height, left, bottom, bar = 560, 220, 30, 30, 50
    tallest = max(counts) or 1
    parts: list[Markup] = [el("line", x1=left, y1=height - bottom, x2=left + BINS * bar, y2=height - bottom)]
    for i, count in enumerate(counts):
        h = (height - bottom - 20) * count / tallest
        x, y = left + i * bar, height - bottom - h
        tip = f"{i * 10}-{i * 10 + 10} %: {count} submission(s)" + (f": {', '.join(names[i])}" if count else "")
        parts.append(
            el(
                "g",
                el("title", tip),
                el("rect", x=f"{x + 4}", y=f"{y:.1f}", width=bar - 8, height=f"{h:.1f}", class_="bar"),
                el("text", count, x=x + bar / 2, y=f"{y - 4:.1f}", text_anchor="middle") if count else "",
                el("text", f"{i * 10}", x=x, y=height - bottom + 14, text_anchor="middle"),
                data_bin=i,
                data_count=count,
            )
        )
    parts.append(el("text", "100 %", x=left + BINS * bar, y=height - bottom + 14, text_anchor="middle"))
    parts.append(el("text", "score, % of maximum", x=left + BINS * bar / 2, y=height - 2, text_anchor="middle"))
    return el(
        "svg",
        parts,
        xmlns="http://www.w3.org/2000/svg",
        width=width,
        height=height,
        viewBox=f"0 0 {width} {height}",
        class_="hist",
        role="img",
        aria_label="histogram of scores",
    )


def _failed_checks(rows: list[Row]) -> Markup:
    """Checks ordered by how many submissions did not pass them, each naming those submissions."""
    order: dict[str, tuple[str, str]] = {}
    failed: dict[str, list[tuple[Row, Verdict]]] = {}
    for row in rows:
        for tier in row.report.tiers:
            for check in tier.checks:
                order.setdefault(check.id, (tier.tier, check.title))
                if check.verdict != Verdict.PASS:
                    failed.setdefault(check.id, []).append((row, check.verdict))
    position = {cid: i for i, cid in enumerate(order)}
    ranked = sorted(failed, key=lambda cid: (-len(failed[cid]), position[cid]))
    if not ranked:
        return el("p", "Every submission passed every check.", class_="sub")
    head = el("tr", el("th", "check"), el("th", "tier"), el("th", "not passed", class_="num"), el("th", "submissions"))
    body = [
        el(
            "tr",
            el("td", el("code", cid), el("div", order[cid][1], class_="sub")),
            el("td", order[cid][0]),
            el("td", f"{len(failed[cid])}/{len(rows)}", class_="num"),
            el(
                "td",
                el(
                    "ul",
                    [
                        el(
                            "li",
                            el("a", row.report.submission, href=f"{row.link}#{check_anchor(cid)}"),
                            " ",
                            badge("v", verdict),
                        )
                        for row, verdict in failed[cid]
                    ],
                    class_="inline",
                ),
            ),
            id=f"failed-{cid}",
        )
        for cid in ranked
    ]
    return el("table", el("thead", head), el("tbody", body), id="failed-checks")


def _misconceptions(rows: list[Row]) -> Markup:
    """The misreadings found in the class, most learners first, each naming its learners: causes, not symptoms."""
    found: dict[str, tuple[str, list[tuple[Row, bool]]]] = {}
    for row in rows:
        for rank, finding in enumerate(row.report.diagnosis):
            explanation, learners = found.setdefault(finding.id, (finding.explanation, []))
            learners.append((row, rank == 0))
    if not found:
        return el("p", "No known misreading explains any failure in this class.", class_="sub")
    ranked = sorted(found, key=lambda mid: (-len(found[mid][1]), mid))
    head = el("tr", el("th", "misreading"), el("th", "learners", class_="num"), el("th", "who (top diagnosis in bold)"))
    body = [
        el(
            "tr",
            el("td", el("code", mid), el("div", found[mid][0], class_="sub")),
            el("td", str(len(found[mid][1])), class_="num"),
            el(
                "td",
                el(
                    "ul",
                    [
                        el(
                            "li",
                            el(
                                "a",
                                el("strong", row.report.submission) if top else row.report.submission,
                                href=f"{row.link}#summary",
                            ),
                        )
                        for row, top in found[mid][1]
                    ],
                    class_="inline",
                ),
            ),
            id=f"misconception-{mid}",
        )
        for mid in ranked
    ]
    return el("table", el("thead", head), el("tbody", body), id="misconceptions")


def render_dashboard(rows: list[Row]) -> str:
    reports = [row.report for row in rows]
    scores = [percent(r) for r in reports]
    problem = reports[0].problem if reports else ""
    stats = (
        (
            f"{len(reports)} submissions · mean {statistics.fmean(scores):.1f} % · "
            f"median {statistics.median(scores):.1f} % of the maximum"
        )
        if scores
        else "no submissions"
    )
    body = join(
        [
            el("h1", f"{problem}: class dashboard"),
            el("p", stats, class_="sub"),
            el("h2", "Submissions"),
            el("p", "Click a column header to sort; click it again to reverse.", class_="sub"),
            _submissions_table(rows),
            el("h2", "Scores"),
            _histogram(reports),
            el("h2", "Most common misreadings"),
            _misconceptions(rows),
            el("h2", "Checks most often not passed"),
            _failed_checks(rows),
        ]
    )
    return page(f"{problem} · class dashboard", body, SORT_SCRIPT)


def write_dashboard(reports: list[Report], out_dir: Path, folders: Sequence[str] | None = None) -> Path:
    """Write `index.html` in grade-all's output folder, linking to each `<folder>/report.html`; `folders[i]` holds
    `reports[i]`'s pages (names with undecodable bytes are sanitized in a report, so only the caller knows)."""
    in_folders: Sequence[str | None] = folders or [None] * len(reports)
    named = zip(reports, in_folders, strict=True)
    rows = [Row(r, report_link(r, folder)) for r, folder in sorted(named, key=lambda pair: pair[0].submission)]
    path = out_dir / "index.html"
    write_atomic(path, render_dashboard(rows))
    return path
