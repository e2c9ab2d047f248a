"""The domain rules, one module per spec chapter, composed into `Services`.

Adding a chapter: write its service module (a `ChapterService` subclass naming its capabilities),
add a field here and one line in `build_services`; its HTTP routes go in `http/routes/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reference_impl.services.access import Access
from reference_impl.services.attachments import AttachmentsService
from reference_impl.services.capabilities import CapabilitiesService
from reference_impl.services.common import ChapterService
from reference_impl.services.context import ContextService
from reference_impl.services.deletion import DeletionService
from reference_impl.services.export import ExportService, TurnPositionService
from reference_impl.services.fork import ForkService
from reference_impl.services.grants import GrantsService
from reference_impl.services.legacy_import import ImportService
from reference_impl.services.leases import LeasesService
from reference_impl.services.listing import ListingService
from reference_impl.services.rewind import RewindService
from reference_impl.services.rollout import ReplayService
from reference_impl.services.sessions import SessionsService
from reference_impl.services.revert import RevertService
from reference_impl.services.session_patch import SessionPatchService
from reference_impl.services.suspend import SuspendService
from reference_impl.services.transcript import TranscriptService
from reference_impl.services.turn_writes import TurnWritesService
from reference_impl.settings import Settings
from reference_impl.store import Store

# What a legacy (pre-lineage) server runs and advertises: profile `legacy` of spec/profiles.yaml.
LEGACY_CAPABILITIES = frozenset(
    {"effective-transcript", "writer-lease", "replay-history", "diagnostics.query-count", "diagnostics.write-count"}
)

# Every replaceable part, by the name `build_services` overrides take (tests substitute one).
PARTS: dict[str, type] = {
    "access": Access,
    "capabilities": CapabilitiesService,
    "sessions": SessionsService,
    "fork": ForkService,
    "transcript": TranscriptService,
    "leases": LeasesService,
    "grants": GrantsService,
    "listing": ListingService,
    "deletion": DeletionService,
    "attachments": AttachmentsService,
    "turn_writes": TurnWritesService,
    "replay": ReplayService,
    "rewind": RewindService,
    "context": ContextService,
    "export": ExportService,
    "turn_positions": TurnPositionService,
    "revert": RevertService,
    "session_patch": SessionPatchService,
    "suspend": SuspendService,
    "legacy_import": ImportService,
}


@dataclass(frozen=True)
class Services:
    access: Access
    capabilities: CapabilitiesService
    sessions: SessionsService
    fork: ForkService
    transcript: TranscriptService
    leases: LeasesService | None  # None when the server runs without `writer-lease`
    grants: GrantsService | None = None  # these three: None without `sharing`
    listing: ListingService | None = None
    deletion: DeletionService | None = None
    attachments: AttachmentsService | None = None  # None without `attachments`
    turn_writes: TurnWritesService | None = None  # None without `idempotent-turns` or `turn-write`
    replay: ReplayService | None = None  # None without `replay-history`
    rewind: RewindService | None = None  # None without `rewind`
    context: ContextService | None = None  # None without `model-context`
    export: ExportService | None = None  # None without `transcript-export`
    turn_positions: TurnPositionService | None = None  # None without `turn-by-position`
    revert: RevertService | None = None  # None without `revert`
    session_patch: SessionPatchService | None = None  # None without `session-patch`
    suspend: SuspendService | None = None  # None without `suspend`
    legacy_import: ImportService | None = None  # None without `legacy-import`

    def chapters(self) -> list[ChapterService]:
        found = [
            self.sessions, self.fork, self.transcript, self.leases, self.grants, self.listing, self.deletion,
            self.attachments, self.turn_writes, self.replay, self.rewind, self.context, self.suspend, self.revert,
            self.session_patch, self.legacy_import, self.export, self.turn_positions,
        ]
        return [chapter for chapter in found if chapter is not None]


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
        if any(capability in settings.disabled_capabilities for capability in cls.capabilities):
            return None
        if settings.legacy and cls.capabilities and not set(cls.capabilities) & LEGACY_CAPABILITIES:
            return None
        return cls(store, limits, access)

    names = (
        "sessions", "fork", "transcript", "leases", "grants", "listing", "deletion", "attachments", "turn_writes",
        "replay", "rewind", "context", "suspend", "revert", "session_patch", "legacy_import", "export", "turn_positions",
    )
    built = {name: chapter(name) for name in names}
    running = [item for item in built.values() if item is not None]
    capabilities = parts["capabilities"](
        limits,
        running,
        settings.query_count_diagnostics,
        write_count_diagnostics=settings.write_count_diagnostics,
        records_examined_diagnostics=settings.records_examined_diagnostics and not settings.legacy,
    )
    if settings.legacy:
        capabilities.only = LEGACY_CAPABILITIES
    return Services(access, capabilities, **built)


__all__ = ["LEGACY_CAPABILITIES", "Services", "ChapterService", "PARTS", "build_services", "part_name"]
