"""Large packages are imported with the collector paused and the heap frozen afterwards
(fems_runtime.imports), hiding the optional packages they can do without."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fems_runtime.imports import import_large


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path; the modules written into it are forgotten after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_an_optional_package_is_hidden_during_the_import_only(packages: Path) -> None:
    (packages / "fems_optional_extra.py").write_text("VALUE = 1\n")
    (packages / "fems_large_pkg.py").write_text(
        "try:\n"
        "    import fems_optional_extra\n"
        "    HAD_EXTRA = True\n"
        "except ImportError:\n"
        "    HAD_EXTRA = False\n"
        "import gc\n"
        "COLLECTING = gc.isenabled()\n"
    )
    module = import_large("fems_large_pkg", hide=("fems_optional_extra",))
    assert module.HAD_EXTRA is False
    assert module.COLLECTING is False  # paused while the package loads
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    assert "fems_optional_extra" not in sys.modules
    import fems_optional_extra  # importable again once the large package is in

    assert fems_optional_extra.VALUE == 1
    assert import_large("fems_large_pkg") is module


def test_a_failed_import_leaves_the_collector_on_and_nothing_hidden(packages: Path) -> None:
    (packages / "fems_broken_pkg.py").write_text("raise RuntimeError('broken')\n")
    with pytest.raises(RuntimeError, match="broken"):
        import_large("fems_broken_pkg", hide=("fems_other_extra",))
    assert gc.isenabled()
    assert "fems_other_extra" not in sys.modules
