"""grader.text: learner text made safe and bounded, folder names that never escape or collide, inert CSV cells."""

from __future__ import annotations

import os
import time

import pytest

from grader.text import LINE_CHARS, MESSAGE_CHARS, RESERVED, clean, clean_line, csv_cell, submission_folder

UNSAFE = ["\x00", "\x07", "\x08", "\x1b", "\r", "\x7f", "\x85", "\x9b", "\u202e", "\u2066", "\u200f", "\u2028"]


@pytest.mark.parametrize("char", UNSAFE)
def test_control_and_bidi_characters_are_spelled_out(char: str) -> None:
    cleaned = clean(f"a{char}b")
    assert char not in cleaned and cleaned.startswith("a\\") and cleaned.endswith("b")


def test_lone_surrogates_become_replacement_characters_and_encode() -> None:
    name = os.fsdecode(b"bad\xff\xfe.py")  # undecodable bytes of a file name, as Python decodes them
    for text in ("msg \ud800 \udfff end", name):
        cleaned = clean(text)
        cleaned.encode("utf-8")  # would raise on a surrogate
        assert "\N{REPLACEMENT CHARACTER}" in cleaned


def test_newlines_and_tabs_are_layout_in_text_but_escaped_on_one_line() -> None:
    assert clean("a\nb\tc\r\nd") == "a\nb\tc\nd"
    assert clean_line("a\nb\tc") == "a\\nb\\tc"


def test_long_text_is_capped_with_a_count_of_what_was_left_out() -> None:
    text = "x" * (8 << 20)
    started = time.perf_counter()
    cleaned = clean(text)
    assert time.perf_counter() - started < 0.5
    assert len(cleaned) <= MESSAGE_CHARS
    kept = len(cleaned) - len(cleaned.partition("…")[2]) - 1
    assert cleaned.endswith(f"…({len(text) - kept} more characters)")


@pytest.mark.parametrize("text", ["x" * 5000, "\x1b" * 5000, "é\x1b" * 3000, "a" * 4090 + "\x1b\x1b", "\ud800" * 9000])
def test_cleaning_is_bounded_and_idempotent(text: str) -> None:
    once = clean(text)
    assert len(once) <= MESSAGE_CHARS and clean(once) == once
    assert len(clean_line(text)) <= LINE_CHARS and clean_line(clean_line(text)) == clean_line(text)


def test_short_safe_text_is_unchanged() -> None:
    for text in ("ValueError: ratio must be positive", "José", "日本語", "[red]x[/red]", "<b>&amp;</b>"):
        assert clean(text) == text


NAMES = [
    "ada.py",
    "summary.csv.py",
    "index.html.py",
    "shards.py",
    "previews.py",
    "...py",
    "..py",
    ".py",
    "py",
    "a b.py",
    "a_b.py",
    "a\tb.py",
    "[red]x[blink].py",
    "\x1b[31mred.py",
    "=1+1.py",
    "-rf.py",
    "ada.PY",
    "x" * 200 + ".py",
    "José.py",
    os.fsdecode(b"\xff\xfe.py"),
    os.fsdecode(b"\xfe\xff.py"),
    "a_b-0123456789abcdef.py",
]


@pytest.mark.parametrize("name", NAMES)
def test_a_submission_folder_is_one_plain_safe_name(name: str) -> None:
    folder = submission_folder(name)
    assert folder not in ("", ".", "..") and not folder.startswith((".", "-"))
    assert "/" not in folder and "\\" not in folder and len(folder) <= 64
    assert folder.isprintable() and folder.encode("utf-8")
    assert folder.lower() not in RESERVED and "." not in folder  # never summary.csv, index.html, shards, ...
    assert submission_folder(name) == folder  # deterministic: a shard computes the same


def test_submission_folders_never_collide() -> None:
    folders = [submission_folder(name) for name in NAMES]
    assert len(set(folders)) == len(NAMES)


def test_a_plain_name_keeps_its_stem() -> None:
    assert [submission_folder(n) for n in ("ada.py", "ada_lovelace-2.py", "José.py")] == [
        "ada",
        "ada_lovelace-2",
        "José",
    ]


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=HYPERLINK(1).py", "'=HYPERLINK(1).py"),
        ("+1.py", "'+1.py"),
        ("-1.py", "'-1.py"),
        ("@SUM(A1).py", "'@SUM(A1).py"),
        ("ada.py", "ada.py"),
        ("graded", "graded"),
    ],
)
def test_csv_cells_that_a_spreadsheet_would_evaluate_start_with_a_quote(value: str, cell: str) -> None:
    assert csv_cell(value) == cell


def test_csv_cells_hold_no_control_characters() -> None:
    for value in ("\tcmd.py", "\rcmd.py", "a\nb.py"):
        assert not any(c in csv_cell(value) for c in "\t\r\n")
