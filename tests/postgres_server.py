"""A throwaway PostgreSQL server for tests: ``server`` (one per test run, on a Unix socket in a
temporary folder) and ``url`` (a fresh database per test). Used by ``tests_postgres/`` (the
storage suite, ``make test-postgres``) and by the batch tests of ``tests/``. It needs
PostgreSQL's server programs (``initdb``, ``pg_ctl``; Debian: ``apt-get install postgresql``,
which ``.ci/run`` installs) and the runtime's ``postgres`` extra.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fems_runtime.store import Store


def _server_program(name: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None
    )
    if found is None:
        raise RuntimeError(f"{name} not found: install PostgreSQL (apt-get install postgresql)")
    return found


def _as_server_user(command: list[str]) -> list[str]:
    """initdb refuses to run as root; CI runs as root, so the server runs as 'postgres'."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """A PostgreSQL server on a Unix socket in a temporary folder; yields its base URL."""
    folder = Path(tempfile.mkdtemp(prefix="fems-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data = folder / "data"
    subprocess.run(
        _as_server_user([_server_program("initdb"), "-D", str(data), "-A", "trust", "-U", "fems"]),
        check=True,
        capture_output=True,
    )
    options = f"-k {folder} -c listen_addresses='' -c fsync=off -c max_connections=300"
    pg_ctl = _server_program("pg_ctl")
    subprocess.run(
        _as_server_user(
            [pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start"]
        ),
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql+psycopg://fems@/{{database}}?host={folder}"
    finally:
        subprocess.run(
            _as_server_user([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def url(server: str, request: pytest.FixtureRequest) -> str:
    """A fresh database per test, so tests never see each other's sessions."""
    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    admin = Store(server.format(database="postgres"))
    with admin.database().engine.connect().execution_options(isolation_level="AUTOCOMMIT") as db:
        db.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"')
        db.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.close()
    return server.format(database=name)
