"""How commands print: one page of text lines and tables, rendered in one output format.

Every command that prints a table writes to an `Out` (`out_for(fmt)`), as it would to a rich
Console: `out.print(text_or_table)`. The format decides what the reader gets:

- ``table``: rich tables with box drawing (the default in a terminal);
- ``plain``: full-width text tables, one line per row, no cell ever cut or wrapped (the
  default when stdout is a pipe or a CI log: rich cuts tables to 80 columns there);
- ``markdown``: pipe tables and lines, for a pull request or a step summary;
- ``csv``: the tables only, as CSV (a page of several tables: blocks separated by an empty
  line, each row led by the table's title);
- ``json``: the tables (rows as objects) and the text lines, as one JSON document.

`csv` and `json` are written when the page is closed (`out.close()`, or leaving a `with`).

>>> from rich.table import Table
>>> t = Table(title="t"); t.add_column("name"); t.add_column("n", justify="right")
>>> t.add_row("a long name", "1"); t.add_row("b", "22")
>>> print(plain_table(t))
t
name          n
-----------  --
a long name   1
b            22
"""

from __future__ import annotations

import csv
import io
import json
import sys
from typing import Any, TextIO

from ridgeline.errors import RidgelineError

FORMATS = ("table", "plain", "markdown", "csv", "json")
FORMAT_HELP = ("Output format: table (rich tables; the default in a terminal), plain "
               "(full-width text; the default when piped), markdown, csv, json.")


def default_format(stream: TextIO | None = None) -> str:
    """`table` when the stream (stdout) is a terminal, else `plain`."""
    s = stream if stream is not None else sys.stdout
    try:
        return "table" if s.isatty() else "plain"
    except (AttributeError, ValueError):
        return "plain"


def check_format(fmt: str | None, field: str = "--format") -> str | None:
    """`fmt` if it is an output format (or None); else the one-line error."""
    if fmt is None or fmt in FORMATS:
        return fmt
    raise RidgelineError(f"{field}: got {fmt!r}; allowed: {', '.join(FORMATS)}")


def resolve_format(fmt: str | None, *, json_flag: bool = False, markdown: bool = False,
                   stream: TextIO | None = None) -> str:
    """The format to print in: `--json`/`--markdown` (the older flags) win, then `--format`,
    then the default for the stream."""
    if json_flag:
        return "json"
    if markdown:
        return "markdown"
    return check_format(fmt) or default_format(stream)


# ---- cells --------------------------------------------------------------------------------

def _plain_text(obj: Any, markup: bool = True) -> str:
    """A cell, a title or a line as plain text: rich markup and styles dropped."""
    from rich.text import Text

    if obj is None:
        return ""
    if isinstance(obj, Text):
        return obj.plain
    s = str(obj)
    if markup and "[" in s:
        try:
            return Text.from_markup(s).plain
        except Exception:
            return s
    return s


def _one_line(s: str) -> str:
    return " ".join(s.split("\n")).strip() if "\n" in s else s


def table_data(table: Any) -> tuple[str, list[str], list[bool], list[list[str]], bool]:
    """(title, headers, right-justified per column, rows of plain cells, shows header) of a
    rich Table."""
    cols = table.columns
    headers = [_one_line(_plain_text(c.header)) for c in cols]
    right = [c.justify == "right" for c in cols]
    n = max((len(c._cells) for c in cols), default=0)
    rows = [[_one_line(_plain_text(c._cells[i])) if i < len(c._cells) else "" for c in cols]
            for i in range(n)]
    return _plain_text(table.title), headers, right, rows, bool(table.show_header)


def plain_table(table: Any) -> str:
    """The table as text: columns padded to their widest cell, two spaces apart."""
    title, headers, right, rows, show_header = table_data(table)
    body = ([headers] if show_header else []) + rows
    widths = [max((len(r[i]) for r in body), default=0) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        parts = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right,
                                                                       strict=True)]
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    if show_header:
        out += [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def markdown_table(table: Any) -> str:
    title, headers, right, rows, show_header = table_data(table)

    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    heads = headers if show_header else [""] * len(headers)
    out = [f"**{esc(title)}**", ""] if title else []
    out.append("| " + " | ".join(esc(h) for h in heads) + " |")
    out.append("|" + "".join("---:|" if r else "---|" for r in right))
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# ---- the page -----------------------------------------------------------------------------

class Out:
    """A console for one command's output in one format (see the module's docstring)."""

    def __init__(self, fmt: str, stderr: bool = False) -> None:
        self.fmt = fmt
        self.stderr = stderr
        self._tables: list[Any] = []
        self._lines: list[str] = []
        self._console: Any = None
        self._closed = False

    @property
    def file(self) -> TextIO:
        return sys.stderr if self.stderr else sys.stdout

    def _rich(self) -> Any:
        if self._console is None:
            from rich.console import Console

            tty = self.file.isatty()
            # Off a terminal rich would cut tables to 80 columns: give it room instead.
            self._console = Console(highlight=False, stderr=self.stderr,
                                    width=None if tty else 10_000)
        return self._console

    def print(self, *objects: Any, style: str | None = None, highlight: bool | None = None,
              markup: bool | None = None, **_: Any) -> None:
        """Print text (rich markup allowed unless markup=False) or a rich Table."""
        from rich.table import Table

        if self.fmt == "table":
            self._rich().print(*objects, style=style, markup=markup, highlight=False)
            return
        for obj in objects or ("",):
            if isinstance(obj, Table):
                self.table(obj)
            else:
                self.line(_plain_text(obj, markup=markup is not False))

    def table(self, table: Any) -> None:
        if self.fmt == "table":
            self._rich().print(table)
        elif self.fmt == "plain":
            self._write(plain_table(table) + "\n")
        elif self.fmt == "markdown":
            self._write(markdown_table(table) + "\n\n")
        else:
            self._tables.append(table)

    def line(self, text: str = "") -> None:
        """One line of plain text."""
        if self.fmt == "table":
            self._rich().print(text, markup=False, highlight=False)
        elif self.fmt == "plain":
            self._write(text + "\n")
        elif self.fmt == "markdown":
            self._write((text + "  \n") if text else "\n")
        else:
            self._lines.append(text)

    def _write(self, text: str) -> None:
        self.file.write(text)

    def close(self) -> None:
        """Write a csv or json page (the other formats are written as they come)."""
        if self._closed:
            return
        self._closed = True
        if self.fmt == "csv":
            self._write(csv_text(self._tables))
        elif self.fmt == "json":
            self._write(json.dumps(json_page(self._tables, self._lines), indent=2) + "\n")
        self.file.flush()

    def __enter__(self) -> Out:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()


def _data_headers(headers: list[str], show_header: bool) -> list[str]:
    """The column names of a table as data: its headers, even where the text hides them
    (a two-column quantity/value table), else column1, column2, ..."""
    if show_header or (all(headers) and len(set(headers)) == len(headers)):
        return headers
    return [f"column{i + 1}" for i in range(len(headers))]


def csv_text(tables: list[Any]) -> str:
    """One table: a CSV with its header. Several: blocks separated by an empty line, each
    column led by `table` (the table's title)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    many = len(tables) > 1
    for k, t in enumerate(tables):
        title, headers, _right, rows, show_header = table_data(t)
        if k:
            buf.write("\n")
        heads = _data_headers(headers, show_header)
        w.writerow((["table"] if many else []) + heads)
        for r in rows:
            w.writerow(([title] if many else []) + r)
    return buf.getvalue()


def json_page(tables: list[Any], lines: list[str]) -> dict[str, Any]:
    out = []
    for t in tables:
        title, headers, _right, rows, show_header = table_data(t)
        heads = _data_headers(headers, show_header)
        out.append({"title": title, "columns": heads,
                    "rows": [dict(zip(heads, r, strict=True)) for r in rows]})
    return {"tables": out, "lines": [x for x in lines if x]}


def markdown_tables(md: str) -> list[Any]:
    """The pipe tables of a markdown document as rich Tables (titled by the heading or bold
    line before each), for `--format csv` of a command whose output is markdown."""
    from rich.table import Table

    tables: list[Any] = []
    title = ""
    rows: list[list[str]] = []
    for ln in [*md.splitlines(), ""]:
        s = ln.strip()
        if s.startswith("|") and s.endswith("|"):
            if not set(s) <= set("|-: "):  # (the |---|---:| line is no row)
                rows.append([c.strip().replace("\\|", "|") for c in s[1:-1].split(" | ")])
            continue
        if rows:
            t = Table(title=title)
            for h in rows[0]:
                t.add_column(h)
            for r in rows[1:]:
                t.add_row(*(r + [""] * (len(rows[0]) - len(r)))[:len(rows[0])])
            tables.append(t)
            rows = []
        if s.startswith("#") or (s.startswith("**") and s.endswith("**")):
            title = s.lstrip("#").strip().strip("*")
    return tables


def print_markdown_document(md: str, fmt: str | None) -> None:
    """A markdown report (plan, advise) in an output format: rich's rendering in a terminal
    (`table`), the markdown text itself for `plain` and `markdown` (it reads well as text,
    and rich would cut its tables to 80 columns off a terminal), its tables for `csv`, and
    the text and tables for `json`."""
    f = check_format(fmt) or default_format()
    if f == "table":
        from rich.console import Console
        from rich.markdown import Markdown

        Console(width=None if sys.stdout.isatty() else 10_000).print(Markdown(md))
    elif f in ("plain", "markdown"):
        sys.stdout.write(md if md.endswith("\n") else md + "\n")
    elif f == "csv":
        sys.stdout.write(csv_text(markdown_tables(md)))
    else:
        sys.stdout.write(json.dumps(json_page(markdown_tables(md), md.splitlines()),
                                    indent=2) + "\n")


def out_for(fmt: str | None = None, *, json_flag: bool = False, markdown: bool = False,
            stderr: bool = False) -> Out:
    """An `Out` in the format the options ask for (see `resolve_format`)."""
    return Out(resolve_format(fmt, json_flag=json_flag, markdown=markdown,
                              stream=sys.stderr if stderr else sys.stdout), stderr=stderr)


__all__ = ["FORMATS", "FORMAT_HELP", "Out", "check_format", "csv_text", "default_format",
           "markdown_table", "out_for", "plain_table", "resolve_format"]
