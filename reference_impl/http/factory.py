"""Build the app from environment variables: how each `serve --workers N` process gets its settings."""

from __future__ import annotations

import json
import os

from starlette.applications import Starlette

from reference_impl.http.app import create_app
from reference_impl.settings import Limits, Settings

ENV = "SESSION_LINEAGE_SERVER_SETTINGS"


def settings_to_environment(settings: Settings) -> None:
    """Hand settings to worker processes, which uvicorn starts from an import string."""
    os.environ[ENV] = json.dumps(
        {
            "database_url": settings.database_url,
            "records_database_url": settings.records_database_url,
            "tokens": settings.tokens,
            "projects": settings.projects,
            "query_count_diagnostics": settings.query_count_diagnostics,
            "write_count_diagnostics": settings.write_count_diagnostics,
            "records_examined_diagnostics": settings.records_examined_diagnostics,
            "limits": vars(settings.limits),
            "legacy": settings.legacy,
            "otlp_endpoint": settings.otlp_endpoint,  # each worker process traces itself
        }
    )


def app_from_environment() -> Starlette:
    """A worker's app. The supervisor started the deployment (`start_deployment`) before any worker."""
    data = json.loads(os.environ[ENV])
    limits = Limits(**data.pop("limits"))
    return create_app(Settings(limits=limits, **data), started=True)
