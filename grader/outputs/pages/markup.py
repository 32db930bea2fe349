"""Safe-by-construction HTML: every string is escaped unless it is `Markup` this package built itself."""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterable

VOID = frozenset({"img", "meta", "br", "col", "link"})


class Markup(str):
    """HTML built here from escaped parts; never made from learner text directly."""


def esc(value: object) -> Markup:
    """Escape anything that is not already `Markup`; learner text (messages, stdout, names) lands here."""
    return value if isinstance(value, Markup) else Markup(html.escape(str(value), quote=True))


def join(parts: Iterable[object]) -> Markup:
    """Concatenate children; a list or tuple child is joined in place, anything else escaped."""
    return Markup("".join(join(part) if isinstance(part, list | tuple) else esc(part) for part in parts))


def el(tag: str, /, *children: object, **attrs: object) -> Markup:
    """One element. Keyword `class_` becomes `class`, `data_sort` becomes `data-sort`; None or False drops it."""
    rendered = []
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        attr = key.rstrip("_").replace("_", "-")
        rendered.append(f" {attr}" if value is True else f' {attr}="{esc(value)}"')
    opening = f"<{tag}{''.join(rendered)}>"
    if tag in VOID:
        return Markup(opening)
    return Markup(f"{opening}{join(children)}</{tag}>")


def png_data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def csp_hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode("ascii") + "'"


CSS = """
:root { --pass: #1a7f37; --fail: #cf222e; --warn: #9a6700; --muted: #57606a; --line: #d0d7de; --bg: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; margin: 0 auto;
       padding: 24px; max-width: 1400px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.score { font-size: 28px; font-weight: 600; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 12px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top; }
th { background: var(--bg); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort="ascending"]::after { content: " \\25B2"; }
table.sortable th[aria-sort="descending"]::after { content: " \\25BC"; }
pre { background: var(--bg); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; margin: 0;
      white-space: pre-wrap; word-break: break-word; max-height: 420px; overflow: auto; font-size: 12.5px; }
td pre { border: 0; background: none; padding: 0; max-height: 220px; }
.badge { display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 12px; font-weight: 600;
         color: #fff; background: var(--muted); white-space: nowrap; }
.v-pass, .s-graded { background: var(--pass); } .v-fail, .v-error { background: var(--fail); }
.v-timeout, .v-crashed { background: var(--warn); } .v-skipped { background: #8c959f; }
.v-judge_error, .s-judge_error { background: #8250df; }
.s-import_error, .s-import_timeout, .s-import_crashed, .s-budget_exceeded, .s-refused { background: var(--fail); }
.tag { font-size: 11px; color: var(--muted); border: 1px solid var(--line); border-radius: 4px; padding: 0 4px; }
.alert { border: 1px solid var(--fail); background: #ffebe9; border-radius: 6px; padding: 8px 12px; }
.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0; }
.meta dt { color: var(--muted); } .meta dd { margin: 0; word-break: break-all; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; margin-bottom: 18px; }
@media (max-width: 1100px) { .pair { grid-template-columns: 1fr; } }
figure { margin: 0; } figcaption { color: var(--muted); font-size: 12px; margin-bottom: 4px; }
figure img { width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; }
.placeholder { border: 2px dashed var(--line); border-radius: 6px; color: var(--muted); padding: 40px 16px;
               text-align: center; }
meter { width: 120px; }
table.checks { table-layout: fixed; } table.checks th:nth-child(1) { width: 28%; }
table.checks th:nth-child(2) { width: 100px; } table.checks th:nth-child(3) { width: 80px; }
table.checks th:nth-child(4) { width: 70px; }
.hist text { font-size: 11px; fill: var(--muted); } .hist rect.bar { fill: #0969da; }
.hist line { stroke: var(--line); }
a { color: #0969da; } ul.inline { list-style: none; padding: 0; margin: 0; }
ul.inline li { display: inline-block; margin: 0 10px 2px 0; }
"""


def page(title: str, body: Markup, script: str = "") -> str:
    """A whole document: inline CSS and script, and a policy that forbids any request outside the page."""
    script_src = csp_hash(script) if script else "'none'"
    policy = (
        f"default-src 'none'; img-src data:; style-src {csp_hash(CSS)}; script-src {script_src}; "
        "base-uri 'none'; form-action 'none'"
    )
    head = join(
        [
            el("meta", charset="utf-8"),
            el("meta", http_equiv="Content-Security-Policy", content=policy),
            el("meta", name="viewport", content="width=device-width, initial-scale=1"),
            el("title", title),
            Markup(f"<style>{CSS}</style>"),
        ]
    )
    tail = Markup(f"<script>{script}</script>") if script else Markup("")
    return f'<!DOCTYPE html>\n<html lang="en">\n<head>{head}</head>\n<body>\n{body}\n{tail}\n</body>\n</html>\n'
