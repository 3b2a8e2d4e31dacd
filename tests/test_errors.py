"""Every fixture in tests/errors/ is a script with mistakes and the diagnostics it must produce.

Fixture format: a ``.fems`` file whose comments state the expected diagnostics, one per line::

    # expect: error 12:7 undeclared variable 'scroe'
    # expect: warning +1:5 is never reached
    # expect: error -2:16 undeclared variable 'fast' | hint: did you mean the string 'fast'?

- ``error`` or ``warning``, then ``LINE:COL`` (1-based). ``+N`` / ``-N`` as the line is relative
  to the comment's own line, so an expectation can sit right above or below its line.
- Then a substring of the message; optionally `` | hint: `` and a substring of the hint.

The harness parses and checks the file (``base_dir`` is tests/errors, so ``code:`` files there
are found) and compares **exactly**: every diagnostic must match one expectation and every
expectation one diagnostic (severity, line and column equal, substrings contained).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from fems2py.checker import check
from fems2py.checks.usage import excuse_unused
from fems2py.diagnostics import Diagnostic
from fems2py.parser import parse

FIXTURES = Path(__file__).parent / "errors"
EXPECT = re.compile(
    r"#\s*expect:\s*(?P<severity>error|warning)\s+(?P<line>[+-]?\d+):(?P<col>\d+)\s+"
    r"(?P<message>.*?)(?:\s+\|\s+hint:\s+(?P<hint>.*))?\s*$"
)


@dataclass(frozen=True)
class Expectation:
    severity: str
    line: int
    col: int
    message: str
    hint: str | None

    def matches(self, diagnostic: Diagnostic) -> bool:
        return (
            diagnostic.severity == self.severity
            and diagnostic.span.line == self.line
            and diagnostic.span.col == self.col
            and self.message in diagnostic.message
            and (self.hint is None or self.hint in (diagnostic.hint or ""))
        )

    def __str__(self) -> str:
        hint = f" | hint: {self.hint}" if self.hint else ""
        return f"{self.severity} {self.line}:{self.col} {self.message}{hint}"


def expectations(source: str) -> list[Expectation]:
    found = []
    for number, text in enumerate(source.splitlines(), start=1):
        match = EXPECT.search(text)
        if match is None:
            continue
        line_text = match["line"]
        line = number + int(line_text) if line_text[0] in "+-" else int(line_text)
        found.append(
            Expectation(match["severity"], line, int(match["col"]), match["message"], match["hint"])
        )
    return found


def diagnose(path: Path) -> list[Diagnostic]:
    source = path.read_text(encoding="utf-8")
    script, parse_diagnostics = parse(source, path.name, path.parent)
    checked = check(script, path.parent)
    return [*excuse_unused(parse_diagnostics, checked.unused_actions), *checked.diagnostics]


def _show(diagnostic: Diagnostic) -> str:
    span = diagnostic.span
    hint = f" | hint: {diagnostic.hint}" if diagnostic.hint else ""
    return f"{diagnostic.severity} {span.line}:{span.col} {diagnostic.message}{hint}"


FILES = sorted(FIXTURES.glob("*.fems"))


def test_there_are_enough_distinct_mistakes() -> None:
    assert len(FILES) >= 30
    assert all(expectations(path.read_text(encoding="utf-8")) for path in FILES)


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_fixture_diagnostics(path: Path) -> None:
    expected = expectations(path.read_text(encoding="utf-8"))
    unmatched = diagnose(path)
    missing = []
    for expectation in expected:
        match = next((d for d in unmatched if expectation.matches(d)), None)
        if match is None:
            missing.append(str(expectation))
        else:
            unmatched.remove(match)
    unexpected = [_show(diagnostic) for diagnostic in unmatched]
    report = "\n".join(["missing:", *missing, "unexpected:", *unexpected])
    assert not missing and not unexpected, report


def test_expectation_format() -> None:
    source = "x\n# expect: error +1:7 undeclared variable 'a' | hint: did you mean 'b'?\ny\n"
    assert expectations(source) == [
        Expectation("error", 3, 7, "undeclared variable 'a'", "did you mean 'b'?")
    ]
