"""Learner-controlled text made safe to store and show: one sanitizer, slugs for folders, CSV cells.

Everything a submission can choose (exception types and messages, printed output, its file name and labels
built from them) passes `clean` where it enters the judge and again at every sink, so no surrogate can break
serialisation, no escape sequence reaches a terminal and no string grows without bound. `clean` is idempotent:
cleaning cleaned text changes nothing, so applying it twice is always safe.
"""

from __future__ import annotations

import hashlib
import os
import re

MESSAGE_CHARS = 4096  # an exception message, a check's message: a few KiB is plenty to act on
LINE_CHARS = 256  # a file name, a type name, a label
STREAM_CHARS = 1 << 20  # stdout/stderr: the worker keeps the first output_kb of each; this is only a backstop

# Characters that would steer a terminal or a text renderer rather than be read: C0 and C1 controls and DEL,
# the bidirectional overrides, embeddings and isolates (Trojan Source), and the Unicode line/paragraph separators.
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE_TEXT = re.compile(f"([{_UNSAFE}])")  # newline and tab are layout in multi-line text
_UNSAFE_LINE = re.compile(f"([{_UNSAFE}\n\t])")
_SURROGATE = re.compile("[\ud800-\udfff]")  # lone surrogates: undecodable bytes under surrogateescape
REPLACEMENT = "\N{REPLACEMENT CHARACTER}"


def _escaped(char: str) -> str:
    code = ord(char)
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def _marker(more: int) -> str:
    return f"…({more} more characters)"


def _table(unsafe: re.Pattern[str]) -> dict[int, str]:
    """What `str.translate` makes of each character: unsafe ones spelled out, surrogates replaced."""
    table = {code: REPLACEMENT for code in range(0xD800, 0xE000)}
    table.update({code: _escaped(chr(code)) for code in range(0x2070) if unsafe.fullmatch(chr(code))})
    return table


_TEXT_TABLE, _LINE_TABLE = _table(_UNSAFE_TEXT), _table(_UNSAFE_LINE)


def clean(value: object, limit: int = MESSAGE_CHARS, multiline: bool = True) -> str:
    """`value` as text that is safe everywhere: valid UTF-8, control characters spelled out (`\\x1b`), at most
    `limit` characters including a closing "…(N more characters)" that counts what was left out."""
    if isinstance(value, bytes | bytearray):
        text = bytes(value).decode("utf-8", "replace")
    else:
        text = value if isinstance(value, str) else str(value)
    if multiline:
        text = text.replace("\r\n", "\n")
    table, unsafe = (_TEXT_TABLE, _UNSAFE_TEXT) if multiline else (_LINE_TABLE, _UNSAFE_LINE)
    head = text[:limit]  # escaping only lengthens text: nothing past `limit` characters can be kept
    escaped = head.translate(table)
    if len(text) <= limit and len(escaped) <= limit:
        return escaped
    budget = limit - len(_marker(len(text)))
    size = used = 0  # characters of the result so far, and of `head` they stand for
    for match in unsafe.finditer(head):
        run = match.start() - used
        if size + run > budget:
            break  # the cut falls in the plain run before this character
        size, used = size + run, match.start()
        cost = len(table[ord(match.group())])
        if size + cost > budget:  # an escape is kept whole or not at all
            return head[:used].translate(table) + _marker(len(text) - used)
        size, used = size + cost, used + 1
    used += max(0, min(budget - size, len(head) - used))
    return head[:used].translate(table) + _marker(len(text) - used)


def clean_line(value: object, limit: int = LINE_CHARS) -> str:
    """`clean` for text shown on one line (names, labels, table cells): newlines and tabs are spelled out too."""
    return clean(value, limit, multiline=False)


# ----------------------------------------------------------------------------- folder names

# Names the class folder holds besides one folder per submission; a submission never takes one of them.
RESERVED = frozenset({"summary", "index", "shards", "previews", "gradescope", "learner", "junit", "reports"})
_SAFE_STEM = re.compile(r"(?!-)[\w-]{1,64}")  # letters of any script, digits, _ and -
_HASHED = re.compile(r".*-[0-9a-f]{16}")  # the shape of a slug with a digest: kept for unsafe names only


def submission_folder(name: str) -> str:
    """The folder a submission's outputs go to: its stem when that is plainly safe, else a readable part and a
    digest of the exact file name (its bytes, undecodable ones included).

    Never `.`, `..`, empty, hidden, a class output (`summary.csv`, `index.html`, `shards`, ...) or the slug of
    another name: a kept stem has none of the characters a digest slug adds, so two different names never meet,
    whichever slice of a class (a shard) they are graded in.
    """
    stem = name.removesuffix(".py")
    if stem != name and _SAFE_STEM.fullmatch(stem) and not _HASHED.fullmatch(stem) and stem.lower() not in RESERVED:
        return stem
    readable = re.sub(r"[^\w-]+", "_", _SURROGATE.sub("_", name.removesuffix(".py"))).strip("_-")[:40]
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]  # 64 bits: no learner can aim at another's slug
    return f"{readable or 'submission'}-{digest}"


# ----------------------------------------------------------------------------- spreadsheets

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> str:
    """A text cell a spreadsheet shows as text: OWASP's CSV-injection rule, a leading quote before = + - @ TAB CR."""
    text = clean_line(value)
    return f"'{text}" if text.startswith(_FORMULA_START) else text
