"""Compiler diagnostics: what went wrong, where, and how to fix it.

Every stage reports problems through :class:`Diagnostics` so that a file's errors are all
collected and printed together, like a C compiler::

    game.fems:12:7: error: undeclared variable 'scroe'
       12 |     -> if (scroe > 3) -> [END]
          |            ^^^^^
    hint: did you mean 'score'?
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from fems2py.nodes import Span

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Diagnostic:
    severity: Severity
    message: str
    span: Span
    hint: str | None = None

    def format(self, source: str | None = None) -> str:
        """``path:line:col: severity: message``, then the source line with a caret, then the hint."""
        lines = [f"{self.span}: {self.severity}: {self.message}"]
        if source is not None:
            lines.extend(_excerpt(source, self.span))
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


EXCERPT_WIDTH = 100  # characters of a long source line shown around the mistake


def _excerpt(source: str, span: Span) -> list[str]:
    """The span's source line and a caret line under it.

    Carets are placed by display width, so they stay under the right character after Chinese
    (double-width) text; a long line is cut to a window around the span.
    """
    source_lines = source.split("\n")  # the lexer's lines (§1.1), not str.splitlines()'s
    if not 1 <= span.line <= len(source_lines):
        return []
    text = source_lines[span.line - 1].rstrip("\r").replace("\t", " ")
    start = min(span.col - 1, len(text))
    end = span.end_col - 1 if span.end_line == span.line else len(text)
    end = max(end, start + 1)
    left, right = 0, len(text)
    if len(text) > EXCERPT_WIDTH:
        left = max(0, min(start - EXCERPT_WIDTH // 3, len(text) - EXCERPT_WIDTH))
        right = left + EXCERPT_WIDTH
    before = ("…" if left else "") + text[left:start]
    shown = before + text[start:right] + ("…" if right < len(text) else "")
    marks = max(1, _display_width(text[start : min(end, right)]))
    gutter = f"{span.line:>5} | "
    blank = " " * (len(gutter) - 2) + "| "
    return [gutter + shown, blank + " " * _display_width(before) + "^" * marks]


def _display_width(text: str) -> int:
    """Terminal columns: wide and full-width characters (Chinese, full-width punctuation) take
    two, combining marks none."""
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return width


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """A ``did you mean 'x'?`` hint for a misspelled name, or None when nothing is close."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def closest_node(name: str, candidates: Iterable[str]) -> str | None:
    """The node name a misspelled ``[name]`` most likely meant, ignoring case, or None."""
    by_lower = {c.lower(): c for c in sorted(set(candidates)) if c != name}
    close = difflib.get_close_matches(name.lower(), sorted(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


class Diagnostics:
    """Collects the diagnostics of one file, in the order they were found."""

    def __init__(self) -> None:
        self._items: list[Diagnostic] = []

    def error(self, message: str, span: Span, hint: str | None = None) -> None:
        self._items.append(Diagnostic("error", message, span, hint))

    def warning(self, message: str, span: Span, hint: str | None = None) -> None:
        self._items.append(Diagnostic("warning", message, span, hint))

    def extend(self, diagnostics: Iterable[Diagnostic]) -> None:
        self._items.extend(diagnostics)

    @property
    def has_errors(self) -> bool:
        return any(item.severity == "error" for item in self._items)

    @property
    def error_count(self) -> int:
        return sum(1 for item in self._items if item.severity == "error")

    def __iter__(self) -> Iterator[Diagnostic]:
        return iter(sorted(self._items, key=lambda d: (d.span.line, d.span.col)))

    def __len__(self) -> int:
        return len(self._items)


class CompileError(Exception):
    """Raised when a file has errors; carries every diagnostic found, warnings included."""

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        errors = [d for d in self.diagnostics if d.severity == "error"]
        first = errors[0] if errors else None
        super().__init__(f"{first.span}: {first.message}" if first else "compile error")
