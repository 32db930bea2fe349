"""Where the project's folders are; importable without torch."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(os.environ.get("PAPERLEET_ROOT", Path(__file__).resolve().parent.parent))


def cache_dir() -> Path:
    """What the grader computes once and keeps (expectations, known-wrong files); no worker can see it."""
    return Path(os.environ.get("PAPERLEET_CACHE", PROJECT_ROOT / "artifacts" / ".cache"))
