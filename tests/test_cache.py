"""The compiler's own tables kept in the user's cache (fems2py/cache.py): made once, read back
by later processes, made again when the file is broken or cannot be written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fems2py.cache import cache_root, pickled


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return cache_root()


def test_a_table_is_made_once_then_read_back(cache: Path) -> None:
    made: list[int] = []

    def make() -> dict[str, int]:
        made.append(1)
        return {"rows": len(made)}

    assert pickled("demo-1", make) == {"rows": 1}
    assert pickled("demo-1", make) == {"rows": 1} and len(made) == 1
    (cache / "tables" / "demo-1.pickle").write_bytes(b"not a pickle")
    assert pickled("demo-1", make) == {"rows": 2}  # broken: made again and rewritten
    assert pickled("demo-1", make) == {"rows": 2} and len(made) == 2


def test_an_unwritable_cache_only_costs_time(tmp_path: Path, monkeypatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # a file where the folder should be
    assert pickled("demo-2", lambda: [1, 2]) == [1, 2]


def test_expressions_compile_the_same_with_the_grammar_read_from_the_cache(tmp_path: Path) -> None:
    """The parso grammar survives the pickle (its token types are restored by name): a second
    process reads it from the cache and compiles expressions and their errors as the first."""
    program = (
        "from fems2py.diagnostics import Diagnostics\n"
        "from fems2py.expressions import compile_expression\n"
        "from fems2py.nodes import Span\n"
        "span = Span('x.fems', 1, 1, 1, 1)\n"
        "diagnostics = Diagnostics()\n"
        "good = compile_expression('len(alive) > 2 and @x.hp >= 1', span, diagnostics)\n"
        "compile_expression('day +', span, diagnostics)\n"
        "print(good.python)\n"
        "print([d.message for d in diagnostics])\n"
    )
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    runs = [
        subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, env=env, check=True
        ).stdout
        for _ in range(2)
    ]
    assert list((tmp_path / "fems2py" / "tables").glob("parso-*.pickle"))
    assert runs[0] == runs[1] and "ctx.attr" in runs[0] and "invalid expression" in runs[0]
