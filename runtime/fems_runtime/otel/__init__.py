"""OpenTelemetry export of a run (``--otel``): GenAI spans and metrics over OTLP/HTTP.

The exporter is a subscriber of the run's events (:mod:`fems_runtime.events`) and learns
nothing any other way. Its packages are the extra ``fems-runtime[otel]``: this module says
whether export is wanted and possible without importing them. A run that exports hands its
events to an export process (:mod:`.forward`); only that process imports them (:mod:`.exporter`,
:mod:`.setup`: its providers, :mod:`.spans`: events → spans).

Export is on with ``--otel`` (``run(otel=True)``) or when one of the standard variables that
point a program at a collector is set (:data:`TURNED_ON_BY`); ``run(otel=False)`` keeps it off
whatever the environment says. Prompts and replies are exported only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for them; a model's reasoning never
is (§13.1).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fems_runtime.records import RunError

if TYPE_CHECKING:
    from fems_runtime.events import RunEvents

OTEL_EXTRA = "fems-runtime[otel]"
TURNED_ON_BY = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")
"""The standard variables whose presence turns export on without ``--otel``."""
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
REPORT_ABSENCE = "FEMS_OTEL_REPORT_ABSENCE"
"""Set (:func:`report_absence`) for an export process that reports a missing collector to its
run's process at each :func:`flush` rather than saying it."""
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


def export_run(
    events: RunEvents,
    option: bool | Mapping[str, str | int] | None,
    script: str,
) -> None:
    """Subscribe the OpenTelemetry exporter to a run's ``events`` when export is wanted
    (``option``: True, False, None for the environment's say, or the attributes of the
    session's span, which also turns it on: a batch's name and index). A missing extra is a
    :class:`RunError` with the ``pip install`` line."""
    tags: dict[str, str | int] | None = None
    if isinstance(option, Mapping):
        tags = dict(option)
    elif not wanted(option):
        return
    problem = missing_extra()
    if problem is not None:
        raise RunError(problem)
    from fems_runtime.otel.forward import forward_run

    service = script.removesuffix(".fems") or "fems2py"
    forward_run(events, service, capture=captures_content(), tags=tags)


def report_absence() -> None:
    """Have this process's export, started after this call, report a missing collector at
    each :func:`flush` instead of saying it: a batch's workers each have an export process,
    and the batch says the warning once for all of them."""
    os.environ[REPORT_ABSENCE] = "1"


def flush() -> str:
    """Send the spans and metrics this process's runs have made (a batch session's end), if
    any of them exports, and wait until they are sent. The warning that no collector answers
    when the export found none and :func:`report_absence` was called, else ``""``."""
    if "fems_runtime.otel.forward" in sys.modules:
        from fems_runtime.otel.forward import flush as flush_export

        return flush_export()
    return ""
