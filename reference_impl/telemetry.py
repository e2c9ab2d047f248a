"""The reference server's OpenTelemetry traces (`serve --otlp-endpoint URL`, the `[otel]` extra).

Imported only when tracing is asked for, so the server runs without the extra. Each app gets its
own tracer provider (never the global one), so several servers in one process (the tests, `check
--embedded`) each export to their own endpoint:

- a server span per request (the ASGI middleware), continuing the caller's W3C `traceparent`
  through the default propagator;
- a database client span per statement an engine sends (SQLAlchemy's `EngineTracer`, one per
  engine, so both stores of a two-store deployment). Only statements: the instrumentor's
  process-wide `Engine.connect` wrapper would add a `connect` client span per pool checkout, which
  is no statement and which `Storage-Round-Trips` does not count. The header counts exactly these
  spans less transaction control (BEGIN, COMMIT, ...; diagnostics.py), the round trip as spans
  define it (DIAG-SPANS-001).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from sqlalchemy.engine import Engine
from starlette.applications import Starlette

SERVICE = "session-lineage-reference"
SCHEDULE_DELAY_MS = 100  # spans leave within ~0.1 s of their request, so a receiver's wait stays short
MAX_QUEUE = 65_536  # a full queue drops spans, and a dropped span is a round trip missing from the count


def instrument(
    app: Starlette,
    engines: Sequence[Engine],
    endpoint: str,
    service_name: str = SERVICE,
    exporter: SpanExporter | None = None,
) -> Callable[[], None]:
    """Trace `app` and the statements of `engines`, exporting over OTLP/HTTP to `endpoint` (or to
    `exporter`, e.g. the SDK's in-memory one in tests); returns the call that flushes and stops it."""
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint)
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}), shutdown_on_exit=True)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, schedule_delay_millis=SCHEDULE_DELAY_MS, max_queue_size=MAX_QUEUE)
    )
    tracer = provider.get_tracer("reference_impl")
    usage = NoOpMeterProvider().get_meter("reference_impl").create_up_down_counter("db.client.connections.usage")
    for engine in engines:
        EngineTracer(tracer, engine, usage)
    # Outermost: the server span covers the diagnostics layer and every statement.
    app.add_middleware(OpenTelemetryMiddleware, tracer_provider=provider, exclude_spans=["receive", "send"])
    return provider.shutdown
