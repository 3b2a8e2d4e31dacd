"""A run exporting to an endpoint where no collector listens: one line says so, naming the
endpoint and what to do; the exporter's own log lines are not shown; and the export gives up
at the first refused connection instead of retrying it for seconds. A collector that answers
(with an error, or after a dropped connection) is the exporter's to retry as usual."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from fems_runtime.otel.setup import Absence, CollectorAbsent, Session, from_environment
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags

from fems2py.build import build_file
from tests.runtime.test_otel_switch import SCRIPT, run

SDK_LINES = ("Transient error", "retrying", "Failed to export", "Traceback")


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def module(tmp_path: Path) -> Path:
    script = tmp_path / "talk.fems"
    script.write_text(SCRIPT, encoding="utf-8")
    return build_file(script, tmp_path / "talk.py").output


def test_a_run_without_a_collector_says_so_once_and_ends(module: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    status, _, err = run(module, "--db", ":memory:", "--otel", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    took = time.monotonic() - began
    assert status == 0, err
    said = [line for line in err.splitlines() if "OpenTelemetry" in line]
    assert said == [
        f"fems: warning: no OpenTelemetry collector answers at {endpoint}/v1/traces: the run's "
        "spans were not exported; start one (docs/guide/observability.md) or unset "
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    ]  # once, though the metrics went nowhere too
    assert not [line for line in err.splitlines() if any(sdk in line for sdk in SDK_LINES)]
    assert took < 10, f"the run took {took:.1f} s"  # the exporter's retries took 14 s or more


def _span() -> ReadableSpan:
    context = SpanContext(1, 1, False, TraceFlags(TraceFlags.SAMPLED))
    return ReadableSpan(name="chat fems/mock", context=context, start_time=1, end_time=2)


def test_an_export_to_no_collector_is_one_refused_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a request and a retry at once, then others after waits of 1, 2 and 4 s."""
    requests_sent: list[str] = []
    send = requests.Session.send

    def counted(
        self: requests.Session, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        requests_sent.append(request.url or "")
        return send(self, request, **kwargs)

    monkeypatch.setattr(requests.Session, "send", counted)
    endpoint = f"http://127.0.0.1:{free_port()}"
    environment = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_METRICS_EXPORTER": "none"}
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    telemetry = from_environment("talk", environment, SimpleSpanProcessor)
    assert telemetry.processor is not None
    exporter = telemetry.processor.span_exporter  # type: ignore[attr-defined]
    assert exporter.export([_span()]) is SpanExportResult.FAILURE
    assert exporter.export([_span()]) is SpanExportResult.FAILURE  # a later batch: one more
    telemetry.shutdown()
    assert requests_sent == [f"{endpoint}/v1/traces"] * 2
    assert capsys.readouterr().err.count("no OpenTelemetry collector answers") == 1


@pytest.fixture
def hanging_up() -> Iterator[str]:
    """An address whose listener accepts each connection and closes it unanswered."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces"
    listener.close()


def test_only_a_refused_connection_is_no_collector(hanging_up: str) -> None:
    absence = Absence()
    session = Session(absence, "spans", None)
    with pytest.raises(CollectorAbsent):
        session.post(f"http://127.0.0.1:{free_port()}/v1/traces", data=b"")
    assert absence.warning
    quiet = Absence()
    with pytest.raises(requests.ConnectionError):  # someone listens: the exporter retries
        Session(quiet, "spans", None).post(hanging_up, data=b"")
    assert not quiet.warning


def test_a_batch_worker_reports_the_absence_and_says_only_what_no_flush_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In a batch's worker (``report``) the warning goes back at the flush that ends each
    session, for the batch to say once; one found after the last flush is said at the end."""
    url = f"http://127.0.0.1:{free_port()}/v1/traces"
    for flushed in (True, False):
        absence = Absence(report=True)
        assert absence.reported() == ""
        with pytest.raises(CollectorAbsent):
            Session(absence, "spans", None).post(url, data=b"")
        assert capsys.readouterr().err == ""
        if flushed:
            assert f"answers at {url}: the sessions' spans were not" in absence.reported()
        absence.say_unreported()
        said = capsys.readouterr().err
        assert said == ("" if flushed else f"{absence.warning}\n")
