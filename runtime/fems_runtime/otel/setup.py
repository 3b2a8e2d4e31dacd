"""The export process's OpenTelemetry providers (:mod:`.exporter`): made at the first run it
exports, and shut down (every span and metric sent) when it exits.

Spans go through the span processor the export process gives (it sends them in batches);
metrics through a periodic reader. Where they go is the OTLP exporter's own reading of
the standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``…_HEADERS``, ``…_TRACES_ENDPOINT``
…, default ``http://localhost:4318``); ``OTEL_TRACES_EXPORTER=none`` or
``OTEL_METRICS_EXPORTER=none`` turns one of the two off (a backend that takes no metrics,
like Phoenix). The resource is the SDK's (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``), its service named after the script when they do not say.

A collector that is not there (nothing listens at the endpoint, or its host is unknown) is
said once, in one line, and costs an export one refused request: the exporter would retry it
for up to ten seconds and log each try (:class:`Session`). A collector that answers slowly, or
with an error, is the exporter's to handle as usual.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
from collections.abc import Mapping
from typing import Any

import requests
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from urllib3.exceptions import NewConnectionError

from fems_runtime.otel import REPORT_ABSENCE
from fems_runtime.version import __version__

SCOPE = "fems_runtime"
"""The instrumentation scope of fems2py's spans and metrics."""
GUIDE = "docs/guide/observability.md"
CREDENTIAL_PROVIDERS = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_METRICS_CREDENTIAL_PROVIDER",
)
"""Variables naming a session of the user's own for the exporters, which then get no
:class:`Session` (the exporter's usual retries and messages)."""


def session_ids(session: int, created: float) -> tuple[int, int]:
    """The trace and root span id of a session's first run, from the session's number and
    creation time (which tell two databases' sessions 1 apart)."""
    digest = hashlib.sha256(f"fems2py/{session}/{created!r}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


class Telemetry:
    """Where finished spans go (a span processor, None: nowhere) and the meter provider,
    with the resource and instrumentation scope every span carries."""

    def __init__(
        self,
        resource: Resource,
        span_exporter: SpanExporter | None,
        metric_reader: MetricReader | None,
        span_processor: type[SpanProcessor],
        absence: Absence | None = None,
    ) -> None:
        self.resource = resource
        self.absence = absence
        self.scope = InstrumentationScope(SCOPE, __version__)
        self.processor: SpanProcessor | None = None
        if span_exporter is not None:
            self.processor = span_processor(span_exporter)  # type: ignore[call-arg]
        readers = [metric_reader] if metric_reader is not None else []
        self.meters = MeterProvider(resource=resource, metric_readers=readers)
        self.meter = self.meters.get_meter(SCOPE, __version__)

    def flush(self) -> None:
        """Send what is queued now (a batch session's end)."""
        if self.processor is not None:
            self.processor.force_flush()
        self.meters.force_flush()

    def shutdown(self) -> None:
        """Send what is queued and stop the exporters' threads; a missing collector found
        since the last report is said here (nothing would say it otherwise)."""
        if self.processor is not None:
            self.processor.shutdown()
        self.meters.shutdown()
        if self.absence is not None:
            self.absence.say_unreported()


class CollectorAbsent(Exception):
    """A request that no collector received: the connection was refused or the host is
    unknown. Not one of the errors the exporter retries, since waiting seconds more would
    not start a collector; the export fails at once."""


class Absence:
    """Whether a request found no collector, said once on standard error for the process
    (the spans' and the metrics' exporters share it; the metrics send from a thread). With
    ``report`` (a batch's worker, :func:`fems_runtime.otel.report_absence`) it is reported at
    each flush instead, for the batch to say once for all its workers."""

    def __init__(self, report: bool = False) -> None:
        self.report = report
        self.warning = ""
        self._reported = False
        self._lock = threading.Lock()

    def found(self, url: str, what: str, variable: str | None) -> None:
        """Say that no collector answers at ``url`` (``what``: the spans or the metrics,
        ``variable``: the one that named the endpoint, None for the default), once."""
        remedy = f"unset {variable}" if variable else "point OTEL_EXPORTER_OTLP_ENDPOINT at one"
        whose = "sessions'" if self.report else "run's"
        with self._lock:
            if self.warning:
                return
            self.warning = (
                f"fems: warning: no OpenTelemetry collector answers at {url}: the {whose} "
                f"{what} were not exported; start one ({GUIDE}) or {remedy}"
            )
        if not self.report:
            print(self.warning, file=sys.stderr, flush=True)

    def reported(self) -> str:
        """The warning for a flush's answer (``""``: every request found a collector)."""
        with self._lock:
            self._reported = bool(self.warning)
            return self.warning

    def say_unreported(self) -> None:
        """Say the warning if it was to be reported and no flush did (found after the last)."""
        if self.report and self.warning and not self._reported:
            print(self.warning, file=sys.stderr, flush=True)


class Session(requests.Session):
    """The HTTP session of an OTLP exporter: a request no collector receives ends with
    :class:`CollectorAbsent`, said by ``absence``, instead of the connection error the
    exporter would retry with growing waits (about 14 s and eight log lines a run)."""

    def __init__(self, absence: Absence, what: str, variable: str | None) -> None:
        super().__init__()
        self.absence = absence
        self.what = what
        self.variable = variable

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        try:
            return super().send(request, **kwargs)
        except requests.ConnectionError as error:
            failed = error.args[0] if error.args else None
            if not isinstance(getattr(failed, "reason", None), NewConnectionError):
                raise  # a timeout, a proxy or TLS error, a dropped connection: retried
            url = request.url or ""
            self.absence.found(url, self.what, self.variable)
            raise CollectorAbsent(url) from error


class WithoutAbsence(logging.Filter):
    """Leaves out the exporter's log lines about a :class:`CollectorAbsent` (said once by
    :class:`Absence`); its other lines stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        values = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(value, CollectorAbsent) for value in values)


def quiet_absence() -> None:
    """Log the SDK's warnings as Python's default does (the message alone, on standard error),
    but none about a collector that is not there."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.addFilter(WithoutAbsence())
    logging.getLogger().addHandler(handler)


def _endpoint_variable(environ: Mapping[str, str], signal: str) -> str | None:
    """The variable that names the endpoint of ``signal`` (TRACES, METRICS), if one does."""
    for name in (f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        if environ.get(name, "").strip():
            return name
    return None


def from_environment(
    service: str,
    environ: Mapping[str, str],
    span_processor: type[SpanProcessor],
) -> Telemetry:
    """Providers exporting over OTLP/HTTP as the standard variables say (``service``: the
    service's name when they do not say)."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    absence = Absence(report=bool(environ.get(REPORT_ABSENCE, "").strip()))
    own_session = any(environ.get(name, "").strip() for name in CREDENTIAL_PROVIDERS)

    def session(what: str, signal: str) -> Session | None:
        return None if own_session else Session(absence, what, _endpoint_variable(environ, signal))

    span_exporter = None
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter(session=session("spans", "TRACES"))
    reader = None
    if environ.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() != "none":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        metrics = OTLPMetricExporter(session=session("metrics", "METRICS"))
        reader = PeriodicExportingMetricReader(metrics)
    return Telemetry(resource, span_exporter, reader, span_processor, absence)
