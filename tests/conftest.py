"""Test-wide settings: builds cache into a throwaway directory, never the user's own; the
Phoenix fixture (tests/phoenix_server.py) shared by the OpenTelemetry tests."""

from __future__ import annotations

import os
import tempfile

import pytest

from tests.phoenix_server import phoenix  # noqa: F401 (one Phoenix for every test that asks)


def pytest_configure(config: pytest.Config) -> None:
    """``fems2py run`` caches builds under ``$XDG_CACHE_HOME/fems2py``; tests (and the CLI
    subprocesses they start, which inherit the variable) use a fresh directory instead."""
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="fems2py-test-cache-")
