"""Self-contained HTML pages people open: one submission's report and the class dashboard."""

from __future__ import annotations

from grader.outputs.pages.dashboard import render_dashboard, write_dashboard
from grader.outputs.pages.report_page import Figure, render_report_page, write_report_page

__all__ = ["Figure", "render_dashboard", "render_report_page", "write_dashboard", "write_report_page"]
