"""The throwaway PostgreSQL server and per-test databases of ``tests/postgres_server.py``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_server import server, url  # noqa: E402  (fixtures for this suite)

__all__ = ["server", "url"]
