"""Mutants: legacy import (capability `legacy-import`)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from typing import Any

from starlette.types import ASGIApp

from reference_impl.errors import InvalidLegacyHistory
from reference_impl.legacy_lines import Line
from reference_impl.services import legacy_import as li
from reference_impl.services.legacy_import import ImportJob, ImportService, Progress
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from tests.mutants import app_with_layers, app_with_service, mutant


def with_job(job_class: type[ImportJob]) -> type[ImportService]:
    class Service(ImportService):
        async def import_stream(self, principal: str, stream: Any, lease_id: str | None = None) -> tuple[int, dict[str, Any]]:
            job = job_class(self, principal, lease_id)
            try:
                return await job.run(stream)
            finally:
                if job.claim is not None:
                    from starlette.concurrency import run_in_threadpool

                    await run_in_threadpool(job.release)

    return Service


# ---------------------------------------------------------------- IMPORT-LIMITS-001
class SmallLines(ImportService):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.limits = replace(self.limits, max_import_line_bytes=512)


@mutant("IMPORT-LIMITS-001", description="max_import_line_bytes is 512, below the minimum")
def import_line_limit_too_small(settings: Settings) -> ASGIApp:
    return app_with_service(settings, SmallLines)


# ---------------------------------------------------------------- IMPORT-FORMAT-001
class KeepsCarriageReturns(ImportJob):
    """Splits lines at CR as well as LF: a CRLF history seems to hold an empty line after each line."""

    async def line(self, line: Line, final: bool = False) -> None:
        await super().line(line, final)
        if line.terminated and line.end - line.start == len(line.data or b"") + 2:
            self.progress.skipped.append([line.number, "malformed"])


@mutant("IMPORT-FORMAT-001", description="a CRLF history is read as if CR ended lines too")
def import_keeps_carriage_returns(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(KeepsCarriageReturns))


class OneTurnPerLine(ImportJob):
    """Makes every record line a turn of its own."""

    async def add(self, number: int, record: Any) -> None:
        if not self.progress.matching and self.batch:
            from starlette.concurrency import run_in_threadpool

            await run_in_threadpool(self.flush, True)
        await super().add(number, replace(record, turn=f"{record.turn}#{number}") if not self.progress.matching else record)


@mutant("IMPORT-FORMAT-001", description="every record line becomes a turn of its own")
def import_one_turn_per_line(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(OneTurnPerLine))


# ---------------------------------------------------------------- IMPORT-SKIP-001
class FailsOnMalformed(ImportJob):
    async def line(self, line: Line, final: bool = False) -> None:
        from reference_impl.legacy_lines import parse_record

        if line.data is None or parse_record(line.data) is None:
            raise InvalidLegacyHistory(f"line {line.number} is not a record line")
        await super().line(line, final)


@mutant("IMPORT-SKIP-001", description="one unreadable line fails the whole import")
def import_fails_on_bad_line(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(FailsOnMalformed))


class ZeroBasedLines(ImportJob):
    def summary(self, fingerprint: str, replayed: bool) -> dict[str, Any]:
        body = super().summary(fingerprint, replayed)
        body["skipped"] = [{**item, "line": max(item["line"] - 1, 2)} for item in body["skipped"]]
        return body


@mutant("IMPORT-SKIP-001", description="skipped lines are reported with the wrong line numbers")
def import_reports_wrong_lines(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(ZeroBasedLines))


class LimitOffByOne(ImportService):
    """Skips a line of exactly max_import_line_bytes as oversized."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.limits = replace(self.limits, max_import_line_bytes=self.limits.max_import_line_bytes - 1)

    def advertised_limits(self) -> dict[str, Any]:
        return {"max_import_line_bytes": self.limits.max_import_line_bytes + 1}


@mutant("IMPORT-SKIP-001", description="a line of exactly max_import_line_bytes is skipped as oversized")
def import_line_limit_off_by_one(settings: Settings) -> ASGIApp:
    return app_with_service(settings, LimitOffByOne)


class SplitsTurnsOnSkippedLines(ImportJob):
    async def line(self, line: Line, final: bool = False) -> None:
        from reference_impl.legacy_lines import parse_record

        bad = line.data is None or parse_record(line.data) is None
        await super().line(line, final)
        if bad and self.batch and not self.progress.matching:
            from starlette.concurrency import run_in_threadpool

            await run_in_threadpool(self.flush, True)


@mutant("IMPORT-SKIP-001", description="a skipped line ends the turn around it")
def import_skipped_line_splits_turn(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(SplitsTurnsOnSkippedLines))


# ---------------------------------------------------------------- IMPORT-IDEMPOTENT-001
class DuplicatesOnSecondRun(ImportJob):
    """Forgets that the history was imported: a second run imports every line again."""

    def _claim_in(self, parent: str | None, meta_line: Line) -> None:
        super()._claim_in(parent, meta_line)
        if self.complete_before is not None:
            self.complete_before = None
            self.bytes_done, self.lines_done = 0, 0
            self.progress = replace(self.progress, skipped=[], records=0, own_turns=0, prefix_sha256=Progress().prefix_sha256)
            self.pending_end = (0, 0, Progress().prefix_sha256)
            self.resumed_from = None


@mutant("IMPORT-IDEMPOTENT-001", description="importing the same file twice imports every line again")
def import_duplicates_on_second_run(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(DuplicatesOnSecondRun))


# ---------------------------------------------------------------- IMPORT-RESUME-001
class RestartsFromScratch(ImportJob):
    """A re-upload of a partial import starts again from line 2 (into the same session)."""

    def _claim_in(self, parent: str | None, meta_line: Line) -> None:
        super()._claim_in(parent, meta_line)
        if self.bytes_done and self.complete_before is None:
            self.bytes_done, self.lines_done = 0, 0
            self.pending_end = (0, 0, Progress().prefix_sha256)
            self.resumed_from = None


class RestartsOnGrowth(RestartsFromScratch):
    def _claim_in(self, parent: str | None, meta_line: Line) -> None:
        ImportJob._claim_in(self, parent, meta_line)
        if self.bytes_done:
            self.complete_before = None
            self.bytes_done, self.lines_done = 0, 0
            self.pending_end = (0, 0, Progress().prefix_sha256)
            self.resumed_from = None

    async def run(self, stream: Any) -> tuple[int, dict[str, Any]]:
        status, body = await super().run(stream)
        return status, body


@mutant("IMPORT-RESUME-001", description="a re-upload imports the history again from its first record line")
def import_restarts_instead_of_resuming(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(RestartsOnGrowth))


# ---------------------------------------------------------------- IMPORT-CONCURRENT-001
class ClaimCheckedThenTaken(ImportJob):
    """Checks for an import in one transaction and starts its own in another: concurrent uploads
    of one history each create a session."""

    def _claim(self, parent: str | None, meta_line: Line) -> None:
        with self.store.read() as tx:
            row = tx.legacy_import(str(self.principal), self.legacy_id)
        if row is not None:
            return super()._claim(parent, meta_line)
        time.sleep(0.005)  # the window between the check and the write
        self.legacy_id = f"{self.legacy_id}~{uuid.uuid4().hex[:8]}"  # its own row: nothing collides
        super()._claim(parent, meta_line)

    def summary(self, fingerprint: str, replayed: bool) -> dict[str, Any]:
        body = super().summary(fingerprint, replayed)
        body["legacy_id"] = body["legacy_id"].split("~")[0]
        return body


@mutant("IMPORT-CONCURRENT-001", select=("legacy_import.concurrent_imports",),
        description="an import checks for an earlier one in one transaction and starts its own in another")
def import_claim_checked_then_taken(settings: Settings) -> ASGIApp:
    class Service(with_job(ClaimCheckedThenTaken)):  # type: ignore[misc]
        @staticmethod
        def session_key(principal: str, legacy_id: str) -> str:
            return ImportService.session_key(principal, legacy_id)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- IMPORT-FORK-001
class CopiesParent(ImportJob):
    """Imports a legacy fork as a root with every line, copied turns included."""

    def _claim_in(self, parent: str | None, meta_line: Line) -> None:
        super()._claim_in(None, meta_line)


@mutant("IMPORT-FORK-001", description="a legacy fork is imported as a root, its copied turns imported again")
def import_child_copies_parent(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(CopiesParent))


# ---------------------------------------------------------------- IMPORT-WRITE-001
class IgnoresLease(ImportJob):
    def flush(self, close: bool) -> None:
        from sqlalchemy import select

        from reference_impl.store import tables as t

        if self.session_id is not None and self.lease_id is None:
            with self.store.read() as tx:
                self.lease_id = tx.conn.execute(
                    select(t.session_leases.c.lease_id).where(t.session_leases.c.session_id == self.session_id)
                ).scalar()
        super().flush(close)


@mutant("IMPORT-WRITE-001", description="continuing an import ignores the writer lease held on its session")
def import_ignores_lease(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(IgnoresLease))


__all__ = ["json", "li", "Transaction", "app_with_layers"]
