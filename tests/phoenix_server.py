"""Arize Phoenix for tests: ``phoenix`` starts it once per test run on free loopback ports
with a temporary working folder, from the venv of its own that ``make test`` installs
(``make phoenix``: .venv/phoenix), and reads the spans it received through its REST API
(``GET /v1/projects/{project}/spans``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PHOENIX = ROOT / ".venv" / "phoenix" / "bin" / "phoenix"
STARTUP_SECONDS = 600  # its first start migrates a new database; the machine may be busy


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Phoenix:
    """A running Phoenix: its base URL (UI, REST API and OTLP/HTTP ``/v1/traces``)."""

    url: str

    def environment(self, project: str) -> dict[str, str]:
        """The variables that point a run's export at ``project`` of this Phoenix (which
        takes traces only: metrics stay home)."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.url,
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
            "OTEL_METRICS_EXPORTER": "none",
        }

    def spans(self, project: str, roots: int = 1) -> list[dict[str, Any]]:
        """Every span of ``project`` once ``roots`` root spans (a run's span ends last) have
        arrived and no more came for a second (Phoenix inserts what it receives in batches)."""
        deadline = time.monotonic() + 120
        before: list[dict[str, Any]] = []
        while True:
            spans = self._all_spans(project)
            arrived = sum(1 for span in spans if span["parent_id"] is None)
            settled = arrived >= roots and len(spans) == len(before)
            if settled or time.monotonic() > deadline:
                return spans
            before = spans
            time.sleep(1)

    def _all_spans(self, project: str) -> list[dict[str, Any]]:
        spans: list[dict[str, Any]] = []
        cursor = ""
        while True:
            query = f"limit=1000&cursor={cursor}" if cursor else "limit=1000"
            try:
                page = self._get(f"/v1/projects/{project}/spans?{query}")
            except urllib.error.HTTPError as error:
                if error.code == 404:  # no span of the project has arrived yet
                    return []
                raise
            spans.extend(page["data"])
            cursor = page.get("next_cursor") or ""
            if not cursor:
                return spans

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return json.load(response)


@pytest.fixture(scope="session")
def phoenix() -> Iterator[Phoenix]:
    """Phoenix on 127.0.0.1, serving until the test run ends."""
    if not PHOENIX.exists():
        raise RuntimeError(f"{PHOENIX} is missing: run `make phoenix` (make test does)")
    port = free_port()
    folder = tempfile.mkdtemp(prefix="fems-phoenix-")
    environment = {
        **os.environ,
        "PHOENIX_WORKING_DIR": folder,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PYTHONUNBUFFERED": "1",  # its log as it goes, for a start that fails
    }
    with open(Path(folder) / "phoenix.log", "w", encoding="utf-8") as log:
        server = subprocess.Popen(
            [str(PHOENIX), "serve"], env=environment, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        running = Phoenix(f"http://127.0.0.1:{port}")
        _wait_until_up(running, server, Path(folder) / "phoenix.log")
        yield running
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def _wait_until_up(running: Phoenix, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"Phoenix exited: {log.read_text(encoding='utf-8')[-2000:]}")
        try:
            running._get("/v1/projects")
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(1)
    raise RuntimeError(f"Phoenix did not start in {STARTUP_SECONDS} s")
