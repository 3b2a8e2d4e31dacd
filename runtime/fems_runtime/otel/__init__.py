"""OpenTelemetry export of a run (``--otel``): GenAI spans and metrics over OTLP/HTTP.

The exporter is a subscriber of the run's events (:mod:`fems_runtime.events`) and learns
nothing any other way. Its packages are the extra ``fems-runtime[otel]``: this module says
whether export is wanted and possible without importing them; :mod:`.setup` (the process's
providers) and :mod:`.spans` (events → spans) import them, and only when export is on.

Export is on with ``--otel`` (``run(otel=True)``) or when one of the standard variables that
point a program at a collector is set (:data:`TURNED_ON_BY`); ``run(otel=False)`` keeps it off
whatever the environment says. Prompts and replies are exported only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for them; a model's reasoning never
is (§13.1).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

OTEL_EXTRA = "fems-runtime[otel]"
TURNED_ON_BY = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")
"""The standard variables whose presence turns export on without ``--otel``."""
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_VALUES = {"true", "1", "yes", "span_only", "span_and_event"}
_PACKAGES = (
    "opentelemetry.sdk",
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.semconv",
)


def wanted(option: bool | None, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a run exports: ``option`` when given, else whether a standard variable of
    :data:`TURNED_ON_BY` is set."""
    if option is not None:
        return bool(option)
    return any(environ.get(name, "").strip() for name in TURNED_ON_BY)


def captures_content(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether prompts, replies and tool arguments are exported (off unless asked)."""
    return environ.get(CAPTURE_CONTENT, "").strip().lower() in _CAPTURE_VALUES


def missing_extra() -> str | None:
    """Why export cannot start here (its packages are not installed), or None."""
    for name in _PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            return f"--otel needs the OpenTelemetry packages: pip install '{OTEL_EXTRA}'"
    return None
