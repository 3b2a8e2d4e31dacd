"""A span as the exporter keeps it while its part of the run goes on: plain data, made into
the SDK's ``ReadableSpan`` once, when it ends, and handed to the span processor.

The exporter knows where each span begins and ends (the run's events), so the SDK's live
spans (context propagation, sampling, a lock and a check per attribute) would be work for
nothing: they cost a run about three ``fems/mock`` calls' time per span (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from fems_runtime.otel.setup import Telemetry

_ids = random.Random()
SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def new_trace_id() -> int:
    return _ids.getrandbits(128) or 1


def new_span_id() -> int:
    return _ids.getrandbits(64) or 1


class OpenSpan:
    """A span begun and not yet ended: its identity, attributes and span events."""

    __slots__ = (
        "attributes",
        "context",
        "events",
        "kind",
        "links",
        "name",
        "parent",
        "start",
        "status",
        "telemetry",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: dict[str, Any],
        start: int,
        kind: SpanKind = SpanKind.INTERNAL,
        links: Sequence[Link] = (),
    ) -> None:
        self.telemetry = telemetry
        self.name = name
        self.context = context
        self.parent = parent
        self.attributes = attributes
        self.start = start
        self.kind = kind
        self.links = links
        self.events: list[Event] = []
        self.status = Status(StatusCode.UNSET)

    @classmethod
    def child(
        cls,
        parent: OpenSpan,
        name: str,
        attributes: dict[str, Any],
        start: int,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> OpenSpan:
        """A span inside ``parent``'s, in its trace."""
        context = SpanContext(parent.context.trace_id, new_span_id(), False, SAMPLED)
        return cls(parent.telemetry, name, context, parent.context, attributes, start, kind)

    def set_attribute(self, name: str, value: Any) -> None:
        self.attributes[name] = value

    def set_attributes(self, values: Mapping[str, Any]) -> None:
        self.attributes.update(values)

    def add_event(self, name: str, attributes: Mapping[str, Any], timestamp: int) -> None:
        self.events.append(Event(name, dict(attributes), timestamp))

    def set_status(self, status: Status) -> None:
        self.status = status

    def end(self, end_time: int) -> None:
        """Hand the finished span to the exporter's processor (which batches it)."""
        processor = self.telemetry.processor
        if processor is None:
            return
        telemetry = self.telemetry
        finished = ReadableSpan(
            name=self.name,
            context=self.context,
            parent=self.parent,
            resource=telemetry.resource,
            attributes=self.attributes,
            events=self.events,
            links=self.links,
            kind=self.kind,
            status=self.status,
            start_time=self.start,
            end_time=end_time,
            instrumentation_scope=telemetry.scope,
        )
        processor.on_end(finished)
