"""Render: Markdown, HTML, the compatibility matrix, comparisons and live status — all from the
store and the decision stored in it (``bakeoff.decide``); nothing here decides anything."""

from __future__ import annotations

from pathlib import Path

from bakeoff.store import Store


def write_reports(out_dir: Path, store: Store) -> Path:
    """Write report.md (``bakeoff report DIR --html`` adds the HTML page); returns its path."""
    from bakeoff.report import markdown

    return markdown.write(out_dir, store)
