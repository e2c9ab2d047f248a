"""Mutants: whole-transcript export (`transcript-export`) and turns by position (`turn-by-position`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import text
from sqlalchemy.sql.selectable import TextualSelect
from starlette.types import ASGIApp, Receive, Scope, Send

from reference_impl import cursors, views
from reference_impl.errors import NotFound
from reference_impl.principals import public_id
from reference_impl.services.export import ExportDocument, ExportService, TurnPositionService, record_segments_of, spans_of
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.documents import CHAIN_NAMING, chain_documents_sql
from reference_impl.store.export import Documents, Guess, Whole
from reference_impl.store.rows import ChainLink, RecordRow, Segment
from tests.mutants import app_with_service, app_with_transaction, mutant, reference_app


class DictExport(ExportService):
    """An export whose HTTP answer is `export()`'s dict, so a mutant overrides that one method
    (the reference streams the documents the database builds instead)."""

    def document(self, principal: str, session_id: str) -> ExportDocument:
        return ExportDocument.of(self.export(principal, session_id))


# ---------------------------------------------------------------- EXPORT-LIMIT-001
class SmallExports(ExportService):
    """Advertises (and applies) max_export_records 500, below the minimum of 1000."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.limits = replace(self.limits, max_export_records=500)


@mutant("EXPORT-LIMIT-001", select=("export.limit_advertised",), description="advertises max_export_records 500, below 1000")
def export_limit_below_minimum(settings: Settings) -> ASGIApp:
    return app_with_service(settings, SmallExports)


# ---------------------------------------------------------------- EXPORT-READ-001
class WholeAncestors(DictExport):
    """Exports every record of every ancestor, ignoring the cuts (and counts them)."""

    def export(self, principal: str, session_id: str) -> dict[str, Any]:
        body = super().export(principal, session_id)
        with self.store.read() as tx:
            chain = self.access.visible_chain(tx, principal, session_id)
            segments = [
                Segment(link.session.session_id, -1, link.session.record_count - 1)
                for link in chain
                if link.session.record_count > 0
            ]
            rows = tx.records(segments, 10**9)
        body["records"] = [views.record(row) for row in rows]
        body["record_count"] = len(rows)
        return body


@mutant("EXPORT-READ-001", select=("export.whole_transcript",), description="the export ignores the cuts: every ancestor's records")
def export_ignores_cuts(settings: Settings) -> ASGIApp:
    return app_with_service(settings, WholeAncestors)


class FinishedTurnsOnly(DictExport):
    """Leaves the running turn, and its records, out of the export."""

    def export(self, principal: str, session_id: str) -> dict[str, Any]:
        body = super().export(principal, session_id)
        running = {turn["turn_id"] for turn in body["turns"] if turn["status"] == "running"}
        body["turns"] = [turn for turn in body["turns"] if turn["turn_id"] not in running]
        body["records"] = [record for record in body["records"] if record["turn_id"] not in running]
        body["turn_count"], body["record_count"] = len(body["turns"]), len(body["records"])
        return body


@mutant("EXPORT-READ-001", select=("export.whole_transcript",), description="the export leaves out a running turn and its records")
def export_without_running_turn(settings: Settings) -> ASGIApp:
    return app_with_service(settings, FinishedTurnsOnly)


class SessionRoleOnly(DictExport):
    """Authorises an export by the role on the session alone, not on its ancestors."""

    def export(self, principal: str, session_id: str) -> dict[str, Any]:
        original = self.access.require_ancestors
        self.access.require_ancestors = lambda *args: None  # type: ignore[method-assign]
        try:
            return super().export(principal, session_id)
        finally:
            self.access.require_ancestors = original  # type: ignore[method-assign]


@mutant("EXPORT-READ-001", select=("export.export_needs_every_ancestor",),
        description="an export needs a role on the session only, not on its ancestors")
def export_skips_ancestor_check(settings: Settings) -> ASGIApp:
    return app_with_service(settings, SessionRoleOnly)


class OneNameInDocuments(Transaction):
    """The database-built export documents name every record by one session (the last segment's,
    normally the session read) instead of the ancestor holding it: the per-span naming parameters
    of the fast path are computed once (a way to be wrong that only the fast path has)."""

    def record_documents(self, segments: Sequence[Segment], batch: int = 0) -> Documents:
        named = segments[-1].session_id
        self.document_naming = lambda _session_id: Transaction.document_naming(named)  # type: ignore[method-assign]
        return super().record_documents(segments, batch)

    def whole_documents(self, spans: Sequence[tuple[str, int, int]], segments: Sequence[Segment]) -> Whole:
        """Read whole (one statement for turns and records), the turns are named by it as well."""
        if segments:
            named = segments[-1].session_id
            self.document_naming = lambda _session_id: Transaction.document_naming(named)  # type: ignore[method-assign]
        return super().whole_documents(spans, segments)

    def chain_documents_query(self) -> TextualSelect:
        """Read with the chain, every document is named by the session read (the chain's row at hop 0)."""
        naming = CHAIN_NAMING._replace(public="(SELECT public_json FROM links WHERE hops = 0)")
        return chain_documents_sql(self.conn.dialect.name, naming)


@mutant("EXPORT-READ-001", select=("export.whole_transcript",),
        description="the export's database-built record documents name every record by the session read")
def export_documents_named_by_one_session(settings: Settings) -> ASGIApp:
    return app_with_transaction(settings, OneNameInDocuments)


class OneTokenInDocuments(Transaction):
    """The database-built record documents derive every id the server made from the token of one
    session (the last segment's, normally the session read) instead of the session holding the
    record: inherited records then get ids they never had (a way to be wrong that only derived ids
    have, reference_impl/store/ids.py)."""

    def segment_params(self, segments: Sequence[Segment], prefix: str = "") -> dict[str, Any]:
        params = super().segment_params(segments, prefix)
        if segments:
            last = self.document_token(segments[-1].session_id)
            params.update({f"{prefix}t{n}": last for n in range(len(segments))})
        return params

    def chain_documents_query(self) -> TextualSelect:
        """Read with the chain, every derived id comes from the token of the session read."""
        naming = CHAIN_NAMING._replace(token="(SELECT token FROM links WHERE hops = 0)")
        return chain_documents_sql(self.conn.dialect.name, naming)


class BlindGuess(Guess):
    """Documents read with the chain, used whatever spans the chain gives."""

    def whole(self, spans: Sequence[tuple[str, int, int]], segments: Sequence[Segment]) -> Whole | None:
        if any(row.tn is None for row in self.rows):
            return None
        return Whole(
            sum(row.tn or 0 for row in self.rows), ",".join(row.td for row in self.rows if row.td),
            sum(row.rn or 0 for row in self.rows), ",".join(row.rd for row in self.rows if row.rd),
        )


class StaleAfterRevert(Transaction):
    """The export's documents are read with the chain as if nothing in it had been reverted, and
    served as they are: the records a revert took out come back (a way to be wrong that only the
    documents read with the chain have)."""

    def chain_documents_query(self) -> TextualSelect:
        query = super().chain_documents_query()
        unguarded = str(query.element).replace("reverted = 0 AND ", "")
        assert unguarded != str(query.element), "the statement's revert guard moved: update this mutant"
        return text(unguarded).columns(*query.column_args)

    def chain_with_documents(
        self, session_id: str, max_hops: int, viewer: str, most: int, limit: int
    ) -> tuple[list[ChainLink], Guess | None]:
        links, guess = super().chain_with_documents(session_id, max_hops, viewer, most, limit)
        return links, None if guess is None else BlindGuess(guess.rows)


@mutant("EXPORT-READ-001", select=("export.export_after_revert",),
        description="the export serves the documents read with the chain as if nothing had been reverted")
def export_documents_stale_after_revert(settings: Settings) -> ASGIApp:
    return app_with_transaction(settings, StaleAfterRevert)


@mutant("EXPORT-READ-001", select=("export.whole_transcript",),
        description="the export's database-built record documents derive inherited records' ids from the session read")
def export_ids_derived_from_one_token(settings: Settings) -> ASGIApp:
    return app_with_transaction(settings, OneTokenInDocuments)


# ---------------------------------------------------------------- EXPORT-TOO-LARGE-001
class LimitOffByOne(ExportService):
    """Refuses a transcript of exactly max_export_records records."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.limits = replace(self.limits, max_export_records=self.limits.max_export_records - 1)

    def advertised_limits(self) -> dict[str, Any]:
        return {"max_export_records": self.limits.max_export_records + 1}


@mutant("EXPORT-TOO-LARGE-001", select=("export.limit_edges",), description="refuses an export of exactly max_export_records records")
def export_limit_off_by_one(settings: Settings) -> ASGIApp:
    return app_with_service(settings, LimitOffByOne)


class NoLimit(ExportService):
    """Exports any length: the advertised limit is not applied."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.advertised = self.limits.max_export_records
        self.limits = replace(self.limits, max_export_records=10**9)

    def advertised_limits(self) -> dict[str, Any]:
        return {"max_export_records": self.advertised}


@mutant("EXPORT-TOO-LARGE-001", select=("export.limit_edges",), description="exports beyond max_export_records instead of 409")
def export_without_limit(settings: Settings) -> ASGIApp:
    return app_with_service(settings, NoLimit)


# ---------------------------------------------------------------- EXPORT-COST-001
class RecordsPerAncestor(Transaction):
    """Reads the records of each segment in a statement of its own: one round trip per ancestor."""

    def records(self, segments: Sequence[Segment], limit: int) -> list[RecordRow]:
        rows: list[RecordRow] = []
        for segment in segments:
            if len(rows) >= limit:
                break
            rows.extend(super().records([segment], limit - len(rows)))
        return rows

    def record_documents(self, segments: Sequence[Segment], batch: int = 0) -> Documents:
        rows: list[Any] = []
        for ordinal, segment in enumerate(segments):
            for part in super().record_documents([segment]).batches():
                rows.extend((ordinal, index, doc) for _, index, doc in part)
        return Documents.of(rows)

    def chain_with_documents(
        self, session_id: str, max_hops: int, viewer: str, most: int, limit: int
    ) -> tuple[list[ChainLink], Guess | None]:
        """No documents with the chain: this reader reads them ancestor by ancestor."""
        return super().chain_with_documents(session_id, max_hops, viewer, 0, 0)[0], None

    def whole_documents(self, spans: Sequence[tuple[str, int, int]], segments: Sequence[Segment]) -> Whole:
        whole = super().whole_documents(spans, segments[:1])
        for segment in segments[1:]:
            more = super().whole_documents([], [segment])
            whole = whole._replace(record_count=whole.record_count + more.record_count,
                                   records=",".join(part for part in (whole.records, more.records) if part))
        return whole


@mutant("EXPORT-COST-001", select=("export.export_cost_by_depth",),
        description="the export (like every read) reads records one ancestor at a time")
def export_reads_per_ancestor(settings: Settings) -> ASGIApp:
    return app_with_transaction(settings, RecordsPerAncestor)


class FilterAfterReading(DictExport):
    """Reads each ancestor's records past the cut too, and drops them after reading (still 3 statements)."""

    def export(self, principal: str, session_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            chain = self.access.visible_chain(tx, principal, session_id)
            spans = spans_of(chain)
            turns = tx.effective_turns([(span.session_id, span.first, span.last) for span in spans])
            wanted = record_segments_of(chain)
            everything = [Segment(link.session.session_id, -1, link.session.record_count - 1) for link in chain]
            rows = tx.records([s for s in everything if s.upto is not None and s.upto >= 0], 10**9)
        kept = [
            row for row in rows
            if any(seg.session_id == row.session_id and seg.after < row.record_index <= (seg.upto or -1) for seg in wanted)
        ]
        return {
            "session_id": public_id(session_id),
            "turn_count": len(turns),
            "record_count": len(kept),
            "turns": [views.turn(turn) for turn in turns],
            "records": [views.record(row) for row in kept],
        }


@mutant("EXPORT-COST-001", select=("export.export_cost_by_depth",),
        description="the export reads every ancestor's records, past the cuts too, and drops the extra after reading")
def export_reads_past_cuts(settings: Settings) -> ASGIApp:
    return app_with_service(settings, FilterAfterReading)


# ---------------------------------------------------------------- TURN-POS-READ-001
class ZeroBased(TurnPositionService):
    """Reads positions as 0-based: position p gives effective turn p + 1."""

    def turn_at(self, principal: str, session_id: str, n: int) -> dict[str, Any]:
        body = super().turn_at(principal, session_id, n + 1)
        body["position"] = n
        return body


@mutant("TURN-POS-READ-001", select=("export.turn_at_every_position",), description="positions are read as 0-based")
def turn_at_zero_based(settings: Settings) -> ASGIApp:
    return app_with_service(settings, ZeroBased)


class OwnTurnsOnly(TurnPositionService):
    """Counts the session's own turns only: position p is its own turn p - 1."""

    @staticmethod
    def _locate(spans: Any, n: int) -> Any:
        own = spans[-1]
        return (own, n - 1) if 1 <= n <= own.turns else None


@mutant("TURN-POS-READ-001", select=("export.turn_at_every_position",), description="positions count the session's own turns only")
def turn_at_own_turns_only(settings: Settings) -> ASGIApp:
    return app_with_service(settings, OwnTurnsOnly)


class NeverMore(TurnPositionService):
    """Says has_more false even when the turn holds more records than it gives."""

    def turn_at(self, principal: str, session_id: str, n: int) -> dict[str, Any]:
        body = super().turn_at(principal, session_id, n)
        body["has_more"] = False
        return body


@mutant("TURN-POS-READ-001", select=("export.turn_at_every_position",), description="has_more is always false")
def turn_at_never_has_more(settings: Settings) -> ASGIApp:
    return app_with_service(settings, NeverMore)


class TurnSessionRoleOnly(TurnPositionService):
    def turn_at(self, principal: str, session_id: str, n: int) -> dict[str, Any]:
        original = self.access.require_ancestors
        self.access.require_ancestors = lambda *args: None  # type: ignore[method-assign]
        try:
            return super().turn_at(principal, session_id, n)
        finally:
            self.access.require_ancestors = original  # type: ignore[method-assign]


@mutant("TURN-POS-READ-001", select=("export.turn_at_needs_every_ancestor",),
        description="a turn by position needs a role on the session only, not on its ancestors")
def turn_at_skips_ancestor_check(settings: Settings) -> ASGIApp:
    return app_with_service(settings, TurnSessionRoleOnly)


# ---------------------------------------------------------------- TURN-POS-RANGE-001
POSITION_PATH = re.compile(r"^(/sessions/[^/]+/effective-turns/)([^/]+)$")


def rewrite_position(app: ASGIApp, rewrite: Any) -> ASGIApp:
    """Rewrite the `position` of turn-by-position requests before the reference routes them."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            match = POSITION_PATH.match(scope["path"])
            if match:
                position = rewrite(match.group(2))
                path = match.group(1) + position
                scope = {**scope, "path": path, "raw_path": path.encode()}
        await app(scope, receive, send)

    return wrapped


def lenient(raw: str) -> str:
    """`int(float(...))` parsing: '01', '+1', '1.0', '1e1' are accepted; 0 and below find no turn."""
    try:
        value = int(float(raw))
    except (ValueError, OverflowError):
        return raw
    return str(value) if value >= 1 else "999999999999999"


@mutant("TURN-POS-RANGE-001", select=("export.positions_out_of_range",), description="positions are parsed leniently (01, +1, 1.0 accepted; 0 is 404)")
def positions_parsed_leniently(settings: Settings) -> ASGIApp:
    return rewrite_position(reference_app(settings), lenient)


@mutant("TURN-POS-RANGE-001", select=("export.positions_out_of_range",), description="a malformed position is a turn not found (404), after the session lookup")
def malformed_position_not_found(settings: Settings) -> ASGIApp:
    return rewrite_position(reference_app(settings), lambda raw: raw if re.fullmatch(r"[1-9][0-9]{0,14}", raw) else "999999999999999")


# ---------------------------------------------------------------- TURN-POS-COST-001
class TurnsOneAncestorAtATime(TurnPositionService):
    """Counts each ancestor's turns with a statement of its own before reading the turn."""

    def turn_at(self, principal: str, session_id: str, n: int) -> dict[str, Any]:
        with self.store.read() as tx:
            for link in self.access.visible_chain(tx, principal, session_id):
                tx.last_finished_turn(link.session.session_id)
        return super().turn_at(principal, session_id, n)


@mutant("TURN-POS-COST-001", select=("export.turn_at_cost",), description="one statement per ancestor before the turn is read")
def turn_at_per_ancestor(settings: Settings) -> ASGIApp:
    return app_with_service(settings, TurnsOneAncestorAtATime)


class RecordsUpToTheTurn(TurnPositionService):
    """Finds the turn's records by reading the effective transcript from its start through the turn
    and keeping the turn's own: still 3 statements, but every record before the turn is examined."""

    def turn_at(self, principal: str, session_id: str, n: int) -> dict[str, Any]:
        with self.store.read() as tx:
            chain = self.access.visible_chain(tx, principal, session_id)
            spans = spans_of(chain)
            found = self._locate(spans, n)
            if found is None:
                raise NotFound(f"no turn at position {n}")
            span, index = found
            turn = self._turn(tx, span.session_id, index)
            holder = next(link.session for link in chain if link.session.session_id == span.session_id)
            last = (turn.end_record_index - 1) if turn.end_record_index is not None else holder.record_count - 1
            segments = []
            for item in record_segments_of(chain):
                if item.session_id == span.session_id and item.after < turn.first_record_index <= (item.upto or -1):
                    segments.append(Segment(item.session_id, item.after, last))
                    break
                segments.append(item)
            rows = [row for row in tx.records(segments, 10**9) if row.turn_id == turn.turn_id]
        size = self.limits.max_page_size
        return {
            "session_id": public_id(session_id),
            "position": n,
            "turn_count": sum(item.turns for item in spans),
            "turn": views.turn(turn),
            "records": [views.record(row) for row in rows[:size]],
            "has_more": len(rows) > size,
            "next_cursor": cursors.encode(cursors.Position("transcript", session_id, rows[min(len(rows), size) - 1].session_id,
                                                           rows[min(len(rows), size) - 1].record_index)) if rows else None,
        }


@mutant("TURN-POS-COST-001", select=("export.turn_at_cost",),
        description="a turn by position reads every record before it and keeps the turn's (3 statements)")
def turn_at_reads_everything_before(settings: Settings) -> ASGIApp:
    return app_with_service(settings, RecordsUpToTheTurn)

