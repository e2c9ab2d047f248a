"""Server settings: storage location, advertised limits and credentials."""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_impl.principals import DEFAULT_PROJECT, Directory


@dataclass(frozen=True)
class Limits:
    """The limits the server advertises in its capability document and enforces."""

    max_lineage_depth: int = 16
    max_page_size: int = 200
    default_page_size: int = 50
    max_record_bytes: int = 65_536
    max_records_per_append: int = 100
    max_request_bytes: int = 1_048_576
    idempotency_key_lifetime_seconds: int = 86_400
    max_lease_seconds: int = 300
    max_attachment_bytes: int = 1_048_576
    max_context_bytes: int = 65_536  # model-context: the budget of a context read
    max_context_record_bytes: int = 4_096  # model-context: a record's cap within it
    max_import_line_bytes: int = 65_536  # legacy-import: the longest line an import reads
    max_export_records: int = 5_000  # transcript-export: the most records (and turns) one export returns


# Advertised while the server exports its traces (Settings.otlp_endpoint): round trips countable from spans.
TRACE_CAPABILITY = "diagnostics.trace-context"

# The diagnostics capabilities, and the setting that sends each one's header.
DIAGNOSTICS_FLAGS = {
    "diagnostics.query-count": "query_count_diagnostics",
    "diagnostics.write-count": "write_count_diagnostics",
    "diagnostics.records-examined": "records_examined_diagnostics",
}


@dataclass(frozen=True)
class Settings:
    """Everything `create_app` needs; tokens map a bearer token to a principal, and projects
    a principal to its project (a principal not named there is in the default project).

    With `tokens` empty the server runs in development mode: any well-formed bearer token is
    accepted and names its own principal, in the default project.
    """

    database_url: str = "sqlite:///session-lineage.db"
    records_database_url: str | None = None  # keep records in a second store
    limits: Limits = field(default_factory=Limits)
    tokens: dict[str, str] = field(default_factory=dict)
    projects: dict[str, str] = field(default_factory=dict)
    query_count_diagnostics: bool = True
    write_count_diagnostics: bool = True  # the Storage-Items-Written header (diagnostics.write-count)
    # the Storage-Records-Examined header (diagnostics.records-examined)
    records_examined_diagnostics: bool = True
    # Optional capabilities this server runs without: any capability outside profile `core`
    # (`writer-lease`, `sharing`, `diagnostics.write-count`, ...). Not advertised; their operations
    # answer 404, their request members 422, and a diagnostics capability's header is not sent.
    disabled_capabilities: frozenset[str] = frozenset()
    # A pre-lineage server (profile `legacy`, `serve --legacy`): no fork, lineage or idempotent forks;
    # clients fork by replaying history on a new session's first turn (capability `replay-history`).
    legacy: bool = False
    # Export OpenTelemetry traces over OTLP/HTTP to this URL (`serve --otlp-endpoint`, the `[otel]`
    # extra): server spans and a database client span per statement (reference_impl/telemetry.py).
    otlp_endpoint: str | None = None

    @property
    def trace_context(self) -> bool:
        """Whether the server advertises `diagnostics.trace-context`: it exports its spans and
        continues the caller's trace, so its round trips can be counted from them."""
        return bool(self.otlp_endpoint) and TRACE_CAPABILITY not in self.disabled_capabilities

    def __post_init__(self) -> None:
        """A disabled diagnostics capability turns its header off (the flags stay the one switch)."""
        for capability, flag in DIAGNOSTICS_FLAGS.items():
            if capability in self.disabled_capabilities:
                object.__setattr__(self, flag, False)

    def directory(self) -> Directory:
        """Which project each principal of the tokens belongs to."""
        if not self.tokens:
            return Directory({}, open=True)
        return Directory({principal: self.projects.get(principal, DEFAULT_PROJECT) for principal in self.tokens.values()})
