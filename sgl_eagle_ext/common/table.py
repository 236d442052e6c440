"""Tables: the one printer for every table a command prints, and the HTML report's.

    t = Table(Col("phase", 14, "<"), Col("mean ms", 10, ".2f"), Col("share", 9, ".1f", "%"))
    print("\\n".join(t.render([("draft", 0.98, 3.9), ("verify", 23.4, 93.2)])))

render() widens a column to its widest cell, so nothing ever runs into its
neighbour; header() and row() keep the given widths, for tables printed a row at a
time as results arrive. None prints as "-"; a str prints as given; anything else
through the column's format spec, then its unit. html() renders the same cells as
an HTML table, so a report shows exactly what the command prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape


@dataclass(frozen=True)
class Col:
    title: str
    width: int = 0  # at least this wide (and as wide as the title)
    fmt: str = ""  # format spec for numbers, e.g. ".2f", "d", "g"
    unit: str = ""  # appended to a formatted value: "x", "%"
    align: str = ">"  # ">" right (numbers), "<" left (names), "^" centred (grid cells)
    sep: str = " "  # the text before this column (not before the first)

    def __post_init__(self):
        if self.align not in "<>^" or len(self.align) != 1:
            raise ValueError(f"column {self.title!r}: align is '<', '>' or '^'")


def text(value, fmt: str = "{:.1f}", missing: str = "-") -> str:
    """One value outside a table (prose, HTML cells): None as `missing`, else `fmt`."""
    return missing if value is None else fmt.format(value)


def L(title: str, width: int = 0, **kw) -> Col:
    """A left-aligned column (names, labels, notes)."""
    return Col(title, width, align="<", **kw)


class Table:
    def __init__(self, *cols: Col, indent: str = "", missing: str = "-"):
        if not cols:
            raise ValueError("a table needs at least one column")
        self.cols = cols
        self.indent = indent
        self.missing = missing

    def cell(self, col: Col, value) -> str:
        if value is None:
            return self.missing
        if isinstance(value, str):
            return value
        return format(value, col.fmt) + col.unit

    def _line(self, texts: Sequence[str], widths: Sequence[int]) -> str:
        if len(texts) != len(self.cols):
            raise ValueError(f"{len(texts)} cells for {len(self.cols)} columns")
        parts = []
        for i, (col, text, width) in enumerate(zip(self.cols, texts, widths)):
            parts.append(("" if i == 0 else col.sep) + f"{text:{col.align}{width}}")
        return (self.indent + "".join(parts)).rstrip()

    def _widths(self) -> list[int]:
        return [max(c.width, len(c.title)) for c in self.cols]

    def header(self) -> str:
        return self._line([c.title for c in self.cols], self._widths())

    def row(self, *values) -> str:
        """One row at the given widths (a cell longer than its column pushes the rest)."""
        return self._line([self.cell(c, v) for c, v in zip(self.cols, values)], self._widths())

    def render(self, rows: Iterable[Sequence], header: bool = True, rule: str = "") -> list[str]:
        """Header (underlined with `rule`, e.g. "-", if given) and rows, each column
        as wide as its widest cell."""
        cells = [[self.cell(c, v) for c, v in zip(self.cols, row)] for row in rows]
        widths = self._widths()
        for texts in cells:
            widths = [max(w, len(t)) for w, t in zip(widths, texts)]
        out = []
        if header:
            out.append(self._line([c.title for c in self.cols], widths))
            if rule:
                out.append(rule * len(out[0]))
        return out + [self._line(texts, widths) for texts in cells]

    def html(self, rows: Iterable[Sequence], bad: Sequence[bool] = ()) -> str:
        """The same cells as an HTML table (escaped); a row marked in `bad` shaded."""

        def tr(tag: str, texts, shade=False) -> str:
            cells = "".join(
                f"<{tag}{' class=l' if c.align == '<' else ''}>{escape(t)}</{tag}>"
                for c, t in zip(self.cols, texts)
            )
            return f"<tr{' class=bad' if shade else ''}>{cells}</tr>"

        body = [
            tr("td", [self.cell(c, v) for c, v in zip(self.cols, row)], i < len(bad) and bad[i])
            for i, row in enumerate(rows)
        ]
        return "<table>" + tr("th", [c.title for c in self.cols]) + "".join(body) + "</table>"
