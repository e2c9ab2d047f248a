"""The domain rules, one module per spec chapter, composed into `Services`.

Adding a chapter: write its service module (a `ChapterService` subclass naming its capabilities) and
add one field to `Services`; its HTTP routes go in `http/routes/`. `PARTS`, the build order and the
capability document's order all follow the fields, so nothing else lists the chapters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, get_args, get_type_hints

from reference_impl.services.access import Access
from reference_impl.services.attachments import AttachmentsService
from reference_impl.services.capabilities import CapabilitiesService
from reference_impl.services.common import ChapterService
from reference_impl.services.context import ContextService
from reference_impl.services.deletion import DeletionService
from reference_impl.services.export import ExportService, TurnPositionService
from reference_impl.services.fork import ForkService
from reference_impl.services.grants import GrantsService
from reference_impl.services.leases import LeasesService
from reference_impl.services.legacy_import import ImportService
from reference_impl.services.listing import ListingService
from reference_impl.services.revert import RevertService
from reference_impl.services.rewind import RewindService
from reference_impl.services.rollout import ReplayService
from reference_impl.services.session_patch import SessionPatchService
from reference_impl.services.sessions import SessionsService
from reference_impl.services.suspend import SuspendService
from reference_impl.services.transcript import TranscriptService
from reference_impl.services.turn_writes import TurnWritesService
from reference_impl.settings import Settings
from reference_impl.store import Store

# What a legacy (pre-lineage) server runs and advertises: profile `legacy` of spec/profiles.yaml.
LEGACY_CAPABILITIES = frozenset(
    {"effective-transcript", "writer-lease", "replay-history", "diagnostics.query-count", "diagnostics.write-count"}
)


@dataclass(frozen=True)
class Services:
    """Every part, one field each. The chapters (after `capabilities`) are built and advertised in
    field order; a chapter is None when the server runs without its capabilities."""

    access: Access
    capabilities: CapabilitiesService
    sessions: SessionsService
    fork: ForkService  # None on a legacy server
    transcript: TranscriptService
    leases: LeasesService | None = None  # None without `writer-lease`
    grants: GrantsService | None = None  # these three: None without `sharing`
    listing: ListingService | None = None
    deletion: DeletionService | None = None
    attachments: AttachmentsService | None = None  # None without `attachments`
    turn_writes: TurnWritesService | None = None  # None without `idempotent-turns` or `turn-write`
    replay: ReplayService | None = None  # None without `replay-history`
    rewind: RewindService | None = None  # None without `rewind`
    context: ContextService | None = None  # None without `model-context`
    suspend: SuspendService | None = None  # None without `suspend`
    revert: RevertService | None = None  # None without `revert`
    session_patch: SessionPatchService | None = None  # None without `session-patch`
    legacy_import: ImportService | None = None  # None without `legacy-import`
    export: ExportService | None = None  # None without `transcript-export`
    turn_positions: TurnPositionService | None = None  # None without `turn-by-position`

    def chapters(self) -> list[ChapterService]:
        """The running chapters, in field order."""
        found = (getattr(self, name) for name in CHAPTERS)
        return [chapter for chapter in found if chapter is not None]


def _part_class(hint: Any) -> type:
    """`X` from a field's type, `X` or `X | None`."""
    return next(arg for arg in get_args(hint) if arg is not type(None)) if get_args(hint) else hint


# Every replaceable part, by the name `build_services` overrides take (tests substitute one).
PARTS: dict[str, type] = {
    item.name: _part_class(get_type_hints(Services)[item.name]) for item in fields(Services)
}
CHAPTERS: tuple[str, ...] = tuple(name for name, cls in PARTS.items() if issubclass(cls, ChapterService))


def part_name(cls: type) -> str:
    """Which part a (sub)class replaces, found through its base classes."""
    for name, base in PARTS.items():
        if issubclass(cls, base):
            return name
    raise TypeError(f"{cls.__name__} is not a subclass of any service part ({', '.join(PARTS)})")


def build_services(store: Store, settings: Settings, overrides: Mapping[str, type] | None = None) -> Services:
    """The services over a store; `overrides` maps a part name to a subclass to use instead."""
    parts = {**PARTS, **(overrides or {})}
    limits = settings.limits
    access = parts["access"](limits, settings.directory())

    def chapter(name: str) -> Any:
        cls = parts[name]
        kept = tuple(capability for capability in cls.capabilities if capability not in settings.disabled_capabilities)
        if cls.capabilities and not kept:
            return None
        if settings.legacy and cls.capabilities and not set(cls.capabilities) & LEGACY_CAPABILITIES:
            return None
        built = cls(store, limits, access)
        if kept != cls.capabilities:  # runs with some of its capabilities: advertises (and honours) only those
            built.capabilities = kept
        return built

    built = {name: chapter(name) for name in CHAPTERS}
    running = [item for item in built.values() if item is not None]
    capabilities = parts["capabilities"](
        limits,
        running,
        settings.query_count_diagnostics,
        write_count_diagnostics=settings.write_count_diagnostics,
        records_examined_diagnostics=settings.records_examined_diagnostics and not settings.legacy,
        trace_context=settings.trace_context,
    )
    if settings.legacy:
        capabilities.only = LEGACY_CAPABILITIES
    return Services(access, capabilities, **built)


__all__ = ["CHAPTERS", "LEGACY_CAPABILITIES", "PARTS", "ChapterService", "Services", "build_services", "part_name"]
