"""Chapter: capabilities. The discovery document is assembled from the chapters the server runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reference_impl.services.common import ChapterService
from reference_impl.settings import TRACE_CAPABILITY, Limits


class CapabilitiesService:
    """Lists each running chapter's capabilities and limits, plus the diagnostics on offer."""

    def __init__(
        self,
        limits: Limits,
        chapters: Sequence[ChapterService],
        query_count_diagnostics: bool,
        write_count_diagnostics: bool = False,
        records_examined_diagnostics: bool = False,
        trace_context: bool = False,
    ) -> None:
        self.limits = limits
        self.chapters = chapters
        self.query_count_diagnostics = query_count_diagnostics
        self.write_count_diagnostics = write_count_diagnostics
        self.records_examined_diagnostics = records_examined_diagnostics
        self.trace_context = trace_context  # exports its spans: diagnostics.trace-context
        self.only: frozenset[str] | None = None  # a legacy server advertises only these


    def capabilities(self, spec_version: str) -> dict[str, Any]:
        names = list(dict.fromkeys(name for chapter in self.chapters for name in chapter.capabilities))
        diagnostics: dict[str, Any] = {"query_count": self.query_count_diagnostics}
        if self.query_count_diagnostics:
            names.append("diagnostics.query-count")
            diagnostics["query_count_header"] = "Storage-Round-Trips"
        diagnostics["write_count"] = self.write_count_diagnostics
        if self.write_count_diagnostics:
            names.append("diagnostics.write-count")
            diagnostics["write_count_header"] = "Storage-Items-Written"
        diagnostics["records_examined"] = self.records_examined_diagnostics
        if self.records_examined_diagnostics:
            names.append("diagnostics.records-examined")
            diagnostics["records_examined_header"] = "Storage-Records-Examined"
        if self.trace_context:
            names.append(TRACE_CAPABILITY)
        if self.only is not None:
            names = [name for name in names if name in self.only]
        limits = self.limits
        advertised: dict[str, Any] = {
            "max_record_bytes": limits.max_record_bytes,
            "max_records_per_append": limits.max_records_per_append,
            "max_request_bytes": limits.max_request_bytes,
            "idempotency_key_lifetime_seconds": limits.idempotency_key_lifetime_seconds,
        }
        for chapter in self.chapters:
            advertised.update(chapter.advertised_limits())
        return {"spec_version": spec_version, "capabilities": names, "limits": advertised, "diagnostics": diagnostics}
