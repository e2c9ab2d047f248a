"""OTLP/HTTP trace receiver: lets the suite count a request's database round trips from the spans a server exports."""

TRACE_CAPABILITY = "diagnostics.trace-context"
