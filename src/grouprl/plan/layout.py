"""How ``grouprl plan`` lays its rows out for the width it is given (only rich here).

From ``WIDE`` columns on, one table: quantity, value and how it follows from the config.
Narrower (a terminal of 80 columns; piped output, which rich gives 80 columns or
``COLUMNS``), each row on a line of its own, quantity and value, with the arithmetic
wrapped below it::

    BATCH
      prompts per step                 16
          data.batch_size
      samples per step                 128
          16 prompts x 8 samples (rollout.n)

Neither breaks a key name: the quantity column never wraps, and the arithmetic wraps at
spaces (only a word longer than a whole line is folded).
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from grouprl.plan.rows import Row

Section = tuple[str, list[Row]]  # title, rows

WIDE = 120  # the table's how column keeps >= 50 columns, wider than any key and its value
VALUE_WIDTH = 26  # the table's value column (a model name such as Qwen/Qwen2.5-72B-Instruct)
HOW_INDENT = 6


class PlanView:
    """The title and the sections, as a table or as stacked rows (``__rich_console__``
    picks by the width rich renders at)."""

    def __init__(self, title: Text, sections: list[Section]) -> None:
        self.title = title
        self.sections = sections

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from _wrapped(self.title, console=console, width=options.max_width)
        if options.max_width >= WIDE:
            yield _table(self.sections)
        else:
            yield from _stacked(self.sections, console=console, width=options.max_width)


def _table(sections: list[Section]) -> Table:
    table = Table(show_header=True, header_style="bold", expand=False, show_lines=False)
    table.add_column("quantity", style="cyan", no_wrap=True)
    table.add_column("value", justify="right", style="bold", overflow="fold", max_width=VALUE_WIDTH)
    table.add_column("how", overflow="fold")  # folds only a word wider than the column
    for i, (title, rows) in enumerate(sections):
        table.add_row(Text(title.upper(), style="bold magenta"), "", "")
        for quantity, value, how in rows:
            table.add_row(quantity, value, how)
        if i < len(sections) - 1:
            table.add_section()
    return table


def _stacked(sections: list[Section], *, console: Console, width: int) -> RenderResult:
    key_width = max(len(quantity) for _, rows in sections for quantity, _, _ in rows)
    for title, rows in sections:
        yield Text("")
        yield Text(title.upper(), style="bold magenta")
        for quantity, value, how in rows:
            yield Text.assemble(("  " + quantity.ljust(key_width), "cyan"), "  ", (value, "bold"))
            yield from _wrapped(Text(how), console=console, width=width, indent=HOW_INDENT)


def _wrapped(text: Text, *, console: Console, width: int, indent: int = 0) -> RenderResult:
    """``text`` wrapped at spaces to ``width`` columns after ``indent`` spaces, without
    the trailing spaces rich leaves where it wraps (a pipe keeps them)."""
    for line in text.wrap(console, width - indent, overflow="fold"):
        line.rstrip()
        yield Text(" " * indent) + line
