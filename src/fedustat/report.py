"""A self-contained Markdown report: ``report.md`` plus its PNG figures in one folder.

The folder works offline: images are linked by relative paths (``figures/<name>.png``)
and written next to the Markdown, so copying the folder copies the whole report. Figures
are matplotlib ``Figure`` objects drawn without pyplot (no global backend is changed);
they are rendered to PNG with the Agg canvas when the report is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MarkdownReport", "markdown_table"]

FIGURE_DIR = "figures"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _cell(value: Any) -> str:
    # A pipe would end the cell; a newline would end the row.
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                   align: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured Markdown table; ``align`` holds ``"l"`` or ``"r"`` per column."""
    if not headers:
        raise ValueError("headers must name at least one column")
    for i, row in enumerate(rows):
        if len(row) != len(headers):
            raise ValueError(f"row {i} has {len(row)} cells but there are {len(headers)} "
                             "headers")
    if align is None:
        align = ["l"] * len(headers)
    if len(align) != len(headers) or any(a not in ("l", "r") for a in align):
        raise ValueError("align must give 'l' or 'r' for every column")
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |",
             "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class _Figure:
    figure: Any
    name: str
    caption: str


@dataclass
class MarkdownReport:
    """Build a report block by block, then :meth:`write` it into a folder.

    Parameters
    ----------
    title:
        The report's top-level heading.
    dpi:
        Resolution of the PNG figures.
    """

    title: str
    dpi: int = 110
    _blocks: list[str | _Figure] = field(default_factory=list, init=False, repr=False)

    def heading(self, text: str, level: int = 2) -> None:
        if not 1 <= level <= 6:
            raise ValueError(f"level must be 1..6, got {level}")
        self._blocks.append("#" * level + " " + text.strip())

    def paragraph(self, text: str) -> None:
        self._blocks.append(text.strip())

    def bullets(self, items: Sequence[str]) -> None:
        if items:
            self._blocks.append("\n".join(f"- {item}" for item in items))

    def code(self, text: str) -> None:
        self._blocks.append("```\n" + text.rstrip("\n") + "\n```")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]],
              align: Sequence[str] | None = None) -> None:
        self._blocks.append(markdown_table(headers, rows, align))

    def figure(self, figure: Any, name: str, caption: str = "") -> None:
        """Add a matplotlib ``Figure``, saved as ``figures/<name>.png`` by :meth:`write`."""
        if not _NAME.match(name):
            raise ValueError(f"figure name must be a plain file name (letters, digits, _ . -), "
                             f"got {name!r}")
        if any(isinstance(b, _Figure) and b.name == name for b in self._blocks):
            raise ValueError(f"a figure named {name!r} is already in the report")
        if not hasattr(figure, "savefig"):
            raise TypeError(f"figure must be a matplotlib Figure, got {type(figure).__name__}")
        self._blocks.append(_Figure(figure, name, caption))

    @property
    def figure_names(self) -> list[str]:
        return [b.name for b in self._blocks if isinstance(b, _Figure)]

    def markdown(self) -> str:
        """The Markdown text (figures as relative links)."""
        parts = [f"# {self.title}"]
        for block in self._blocks:
            if isinstance(block, _Figure):
                alt = block.caption or block.name
                text = f"![{_cell(alt)}]({FIGURE_DIR}/{block.name}.png)"
                if block.caption:
                    text += f"\n\n*{block.caption}*"
                parts.append(text)
            else:
                parts.append(block)
        return "\n\n".join(parts) + "\n"

    def write(self, out_dir: str | Path, filename: str = "report.md") -> Path:
        """Write ``filename`` and the figures into ``out_dir`` (created if needed).

        Returns the path of the Markdown file.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        figures = [b for b in self._blocks if isinstance(b, _Figure)]
        if figures:
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            (out / FIGURE_DIR).mkdir(exist_ok=True)
            for fig in figures:
                FigureCanvasAgg(fig.figure)
                fig.figure.savefig(out / FIGURE_DIR / f"{fig.name}.png", dpi=self.dpi,
                                   bbox_inches="tight")
        path = out / filename
        path.write_text(self.markdown(), encoding="utf-8")
        return path
