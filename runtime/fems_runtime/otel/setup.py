"""The export process's OpenTelemetry providers (:mod:`.exporter`): made at the first run it
exports, and shut down (every span and metric sent) when it exits.

Spans go through the span processor the export process gives (it sends them in batches);
metrics through a periodic reader. Where they go is the OTLP exporter's own reading of
the standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``…_HEADERS``, ``…_TRACES_ENDPOINT``
…, default ``http://localhost:4318``); ``OTEL_TRACES_EXPORTER=none`` or
``OTEL_METRICS_EXPORTER=none`` turns one of the two off (a backend that takes no metrics,
like Phoenix). The resource is the SDK's (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``), its service named after the script when they do not say.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from fems_runtime.version import __version__

SCOPE = "fems_runtime"
"""The instrumentation scope of fems2py's spans and metrics."""


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
    ) -> None:
        self.resource = resource
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
        """Send what is queued and stop the exporters' threads."""
        if self.processor is not None:
            self.processor.shutdown()
        self.meters.shutdown()


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
    span_exporter = None
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter()
    reader = None
    if environ.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() != "none":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    return Telemetry(resource, span_exporter, reader, span_processor)
