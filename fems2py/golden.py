"""Regenerate the golden files: ``python -m fems2py.golden`` (``make golden``).

Each ``golden/<case>/`` holds an ``input.fems`` (plus any ``code:`` files it names) and the
``expected.py`` the compiler produces for it. ``tests/test_golden.py`` fails when the compiler's
output differs, so a change to the generated code shows up as a reviewed diff of these files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from fems2py.build import build_source
from fems2py.diagnostics import CompileError

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"
INPUT, EXPECTED = "input.fems", "expected.py"


def cases(root: Path = GOLDEN_DIR) -> list[Path]:
    """Every case directory (one with an ``input.fems``), sorted by name."""
    return sorted(path.parent for path in root.glob(f"*/{INPUT}"))


def expected_source(case: Path) -> str:
    """What the compiler generates for a case today."""
    return build_source(case / INPUT, case / EXPECTED)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate golden/<case>/expected.py.")
    parser.add_argument("names", nargs="*", help="only these cases (default: all)")
    args = parser.parse_args(argv)
    failed = False
    for case in cases():
        if args.names and case.name not in args.names:
            continue
        try:
            text = expected_source(case)
        except CompileError as error:
            for diagnostic in error.diagnostics:
                print(diagnostic.format(), file=sys.stderr)
            failed = True
            continue
        target = case / EXPECTED
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            print(f"updated {target.relative_to(GOLDEN_DIR.parent)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
