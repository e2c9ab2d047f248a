"""Chapter: legacy import (capability `legacy-import`).

`POST /imports` streams a legacy single-file JSONL history (a `session_meta` line, then one record
per line) into one session: consecutive lines with the same `turn_id` are one turn. The upload is
read line by line with bounded memory; malformed, oversized and truncated lines are skipped and
reported by line number. Progress is committed in batches with the records, so a re-upload of the
same file continues after the last line imported; a file imported completely is replayed, not
imported again (its fingerprint: size and SHA-256). When the meta line names a parent, the parent
must have been imported first; the leading turns the child copied from it are inherited through a
fork instead of being imported again.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from starlette.concurrency import run_in_threadpool

from reference_impl.canonical import canonical
from reference_impl.errors import (
    ImportInProgress,
    InvalidLegacyHistory,
    LegacyConflict,
    LegacyParentMissing,
    StorageUnavailable,
)
from reference_impl.legacy_lines import Line, LineReader, RecordLine, parse_meta, parse_record
from reference_impl.principals import Caller, public_id
from reference_impl.services.common import ChapterService, new_id, new_key, timestamp, utcnow
from reference_impl.services.fork import ForkService
from reference_impl.store import Transaction
from reference_impl.store.store import IntegrityError, StorageError

CLAIM_SECONDS = 60
BATCH_RECORDS = 100
ID_NAMESPACE = uuid.UUID("6f1c1c1e-8a59-4d7c-9a55-6b2b3f2f6a10")


def chained(previous: str, item: Any) -> str:
    """A running digest: a turn's lines hashed in order, resumable across uploads."""
    return hashlib.sha256((previous + canonical(item)).encode()).hexdigest()


@dataclass
class Progress:
    """What a row's `state` holds (JSON), besides bytes and lines done."""

    parent_legacy_id: str | None = None
    parent_session_id: str | None = None
    parent_turns: list[list[Any]] = field(default_factory=list)  # the parent's turns: [legacy id, digest, turn id]
    matching: bool = False  # still comparing leading turns with the parent's
    inherited: int = 0
    turns: list[list[Any]] = field(default_factory=list)  # this history's turns: [legacy id, digest, turn id]
    open: dict[str, Any] | None = None  # the turn receiving records: legacy id, turn id, role, digest
    skipped: list[list[Any]] = field(default_factory=list)  # [line, reason]
    records: int = 0
    own_turns: int = 0
    lines: int = 0
    prefix_sha256: str = hashlib.sha256(b"").hexdigest()

    def dump(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))

    @classmethod
    def load(cls, text: str) -> "Progress":
        return cls(**json.loads(text)) if text else cls()


class ImportService(ChapterService):
    chapter = "legacy_import"
    capabilities = ("legacy-import",)

    def advertised_limits(self) -> dict[str, Any]:
        return {"max_import_line_bytes": self.limits.max_import_line_bytes}

    async def import_stream(
        self, principal: str, stream: AsyncIterator[bytes], lease_id: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        job = ImportJob(self, principal, lease_id)
        try:
            return await job.run(stream)
        finally:
            if job.claim is not None:
                await run_in_threadpool(job.release)

    # ---------------------------------------------------------------- transactions (run in threads)
    @staticmethod
    def session_key(principal: str, legacy_id: str) -> str:
        """The session an import creates: derived from principal and legacy id, so that a retried
        creation (and a retried fork of a child) names the same session."""
        public = str(uuid.uuid5(ID_NAMESPACE, f"{principal}|{legacy_id}"))
        return principal.key(public) if isinstance(principal, Caller) else public


class ImportJob:
    def __init__(self, service: ImportService, principal: str, lease_id: str | None) -> None:
        self.service = service
        self.store = service.store
        self.principal = principal
        self.lease_id = lease_id
        self.limit = service.limits.max_import_line_bytes
        self.claim: str | None = None
        self.legacy_id = ""
        self.session_id: str | None = None
        self.progress = Progress()
        self.bytes_done = 0
        self.lines_done = 0
        self.resumed_from: int | None = None
        self.created = False
        self.complete_before: str | None = None  # fingerprint of a complete earlier import
        self.batch: list[tuple[int, RecordLine]] = []
        self.buffered_turn: list[tuple[int, RecordLine]] = []  # while matching the parent's turns
        self.pending_end: tuple[int, int, str] = (0, 0, Progress().prefix_sha256)  # bytes, lines, digest reached

    # ---------------------------------------------------------------- the stream
    async def run(self, stream: AsyncIterator[bytes]) -> tuple[int, dict[str, Any]]:
        reader = LineReader(self.limit)
        meta_seen = False
        reached = False  # a line ended exactly where the earlier import stopped, with the same bytes
        async for chunk in stream:
            for line in reader.feed(chunk):
                if not meta_seen:
                    meta_seen = True
                    await self.start(line)
                    reached = self.bytes_done == 0 or (line.end == self.bytes_done and line.digest == self.progress.prefix_sha256)
                    self.pending_end = max(self.pending_end, (line.end, line.number, line.digest))
                    continue
                if line.end <= self.bytes_done:
                    if line.end == self.bytes_done:
                        reached = line.digest == self.progress.prefix_sha256
                    continue  # the meta line, or imported by an earlier upload
                if not reached:
                    raise LegacyConflict(f"the file differs from the history {self.legacy_id} imported before")
                await self.line(line)
        last = reader.finish()
        if last is not None:
            if not meta_seen:
                meta_seen = True
                await self.start(last)
                reached = self.bytes_done == 0 or (last.end == self.bytes_done and last.digest == self.progress.prefix_sha256)
                self.pending_end = max(self.pending_end, (last.end, last.number, last.digest))
            elif last.end <= self.bytes_done:
                if last.end == self.bytes_done:
                    reached = last.digest == self.progress.prefix_sha256
            elif not reached:
                raise LegacyConflict(f"the file differs from the history {self.legacy_id} imported before")
            else:
                await self.line(last, final=True)
        if not meta_seen:
            raise InvalidLegacyHistory("the file is empty: a legacy history starts with a session_meta line")
        if not reached:
            raise LegacyConflict(f"the file differs from the history {self.legacy_id} imported before")
        fingerprint = f"{reader.offset}:{reader.digest()}"
        if self.complete_before == fingerprint:
            return 200, self.summary(fingerprint, replayed=True)
        await self.finish(reader.offset, fingerprint)
        return (201 if self.created else 200), self.summary(fingerprint, replayed=False)

    # ---------------------------------------------------------------- meta line and claim
    async def start(self, line: Line) -> None:
        meta = parse_meta(line.data)
        if meta is None:
            raise InvalidLegacyHistory(
                "line 1 is not a session_meta line with an id of 1 to 128 characters; nothing was imported"
            )
        self.legacy_id = meta["id"]
        await run_in_threadpool(self._claim, meta.get("forked_from_id"), line)

    def _claim(self, parent: str | None, meta_line: Line) -> None:
        try:
            self._claim_in(parent, meta_line)
        except IntegrityError:  # another upload inserted the row first
            raise ImportInProgress(f"history {self.legacy_id} is being imported by another upload; retry later") from None

    def _claim_in(self, parent: str | None, meta_line: Line) -> None:
        now = utcnow()
        claim = f"{timestamp(now + timedelta(seconds=CLAIM_SECONDS))}#{secrets.token_hex(4)}"
        with self.store.write() as tx:
            row = tx.legacy_import(self.principal, self.legacy_id)
            if row is None:
                progress = Progress(lines=1)
                if parent is not None:
                    parent_row = tx.legacy_import(self.principal, parent)
                    if parent_row is None or parent_row.status != "complete" or parent_row.session_id is None:
                        raise LegacyParentMissing(
                            f"the history names {parent} as its fork parent; import that history first"
                        )
                    progress.parent_legacy_id = parent
                    progress.parent_session_id = parent_row.session_id
                    progress.parent_turns = Progress.load(parent_row.state).turns
                    progress.matching = True
                tx.insert_legacy_import(
                    {
                        "principal": str(self.principal),
                        "legacy_id": self.legacy_id,
                        "session_id": None,
                        "status": "partial",
                        "fingerprint": None,
                        "bytes_done": 0,
                        "lines_done": 0,
                        "claimed_until": claim,
                        "state": progress.dump(),
                        "created_at": timestamp(now),
                        "updated_at": timestamp(now),
                    }
                )
                self.claim = claim
                self.progress = progress
                return
            if not tx.claim_legacy_import(str(self.principal), self.legacy_id, claim, timestamp(now)):
                raise ImportInProgress(f"history {self.legacy_id} is being imported by another upload; retry later")
            self.claim = claim
            self.session_id = row.session_id
            self.bytes_done, self.lines_done = row.bytes_done, row.lines_done
            self.pending_end = (row.bytes_done, row.lines_done, Progress.load(row.state).prefix_sha256)
            self.progress = Progress.load(row.state)
            self.resumed_from = row.lines_done + 1 if row.bytes_done > 0 else None
            if row.status == "complete":
                self.complete_before = row.fingerprint

    def release(self) -> None:
        assert self.claim is not None
        try:
            with self.store.write() as tx:
                tx.save_legacy_import(self.principal, self.legacy_id, self.claim, claimed_until=None)
        except StorageError:
            pass  # the claim expires on its own
        self.claim = None

    # ---------------------------------------------------------------- lines
    async def line(self, line: Line, final: bool = False) -> None:
        record = None
        reason = None
        if line.data is None:
            reason = "oversized"
        else:
            record = parse_record(line.data)
            if record is None:
                reason = "truncated" if final and not line.terminated else "malformed"
        if reason is not None:
            self.progress.skipped.append([line.number, reason])
        else:
            assert record is not None
            await self.add(line.number, record)
        self.pending_end = (line.end, line.number, line.digest)
        if self.progress.matching:
            return  # progress moves at turn boundaries while matching the parent
        if len(self.batch) >= BATCH_RECORDS:
            await run_in_threadpool(self.flush, False)

    async def add(self, number: int, record: RecordLine) -> None:
        if self.progress.matching:
            if self.buffered_turn and self.buffered_turn[0][1].turn != record.turn:
                await run_in_threadpool(self.resolve_buffered, False)
            if self.progress.matching:
                self.buffered_turn.append((number, record))
                return
        if self.batch and self.batch[-1][1].turn != record.turn:
            await run_in_threadpool(self.flush, False)
        self.batch.append((number, record))

    def resolve_buffered(self, at_end: bool) -> None:
        """The buffered leading turn of a child: inherited when it equals the parent's next turn,
        else the parent prefix ends and the buffered turn is the child's first own turn."""
        progress = self.progress
        turn = self.buffered_turn
        digest = ""
        for _, record in turn:
            digest = chained(digest, [turn[0][1].role, record.type, record.payload])
        k = progress.inherited
        if turn and k < len(progress.parent_turns) and progress.parent_turns[k][:2] == [turn[0][1].turn, digest]:
            progress.inherited += 1
            progress.turns.append(list(progress.parent_turns[k]))
            self.buffered_turn = []
            self._commit_progress()
            return
        self._end_matching()
        self.batch = turn
        self.buffered_turn = []

    def _end_matching(self) -> None:
        self.progress.matching = False
        self.ensure_session()

    # ---------------------------------------------------------------- writes
    def ensure_session(self) -> None:
        """Create the session: a root, or a fork of the parent through the inherited turns. Its id
        derives from principal and legacy id, so a retried fork replays instead of forking twice."""
        if self.session_id is not None:
            return
        key = self.service.session_key(self.principal, self.legacy_id)
        progress = self.progress
        if progress.parent_session_id is None:
            with self.store.write() as tx:
                tx.insert_session(
                    {
                        "session_id": key,
                        "owner": str(self.principal),
                        "name": None,
                        "description": f"imported from legacy history {self.legacy_id}"[:1024],
                        "created_at": timestamp(utcnow()),
                        "depth": 0,
                        "turn_count": 0,
                        "record_count": 0,
                        "running_turn_id": None,
                    }
                )
                self.session_id = key
                self._save(tx)
        else:
            fork = ForkService(self.store, self.service.limits, self.service.access)
            if progress.inherited:
                cut = {"mode": "through", "turn_id": progress.parent_turns[progress.inherited - 1][2]}
            elif progress.parent_turns:
                cut = {"mode": "before", "turn_id": progress.parent_turns[0][2]}
            else:
                cut = {"mode": "latest"}
            fork.fork(self.principal, progress.parent_session_id, {"cut": cut, "target_session_id": key}, None)
            self.session_id = key
            self._commit_progress()
        self.created = True

    def _save(self, tx: Transaction, **extra: Any) -> None:
        assert self.claim is not None
        bytes_done, lines_done, digest = self.pending_end
        if bytes_done > self.bytes_done:
            self.bytes_done, self.lines_done = bytes_done, lines_done
            self.progress.prefix_sha256 = digest
        self.progress.lines = self.lines_done
        ok = tx.save_legacy_import(
            str(self.principal),
            self.legacy_id,
            self.claim,
            session_id=self.session_id,
            bytes_done=self.bytes_done,
            lines_done=self.lines_done,
            state=self.progress.dump(),
            updated_at=timestamp(utcnow()),
            **extra,
        )
        if not ok:
            raise ImportInProgress(f"history {self.legacy_id}: another upload took over this import")

    def _commit_progress(self) -> None:
        with self.store.write() as tx:
            self._save(tx)

    def flush(self, close: bool) -> None:
        """Write the batch (records of one turn) and the progress it reaches in one transaction.

        Two stores: the core transaction reserves the indexes and records the progress, then the
        records store takes the records, then the turn is closed; if the records store refuses,
        the indexes are given back and the progress goes back to before the batch (the turn stays
        open), so the next upload reads those lines again.
        """
        progress = self.progress
        batch, self.batch = self.batch, []
        rows: list[dict[str, Any]] = []
        first = -1
        self.ensure_session()
        split = self.store.split
        with self.store.write() as tx:
            assert self.session_id is not None
            self.service.access.writable_session(tx, self.principal, self.session_id, self.lease_id)
            if batch:
                record = batch[0][1]
                if progress.open is not None and progress.open["legacy"] != record.turn:
                    self._close_open(tx)
                if progress.open is None:
                    self._open_turn(tx, record)
                assert progress.open is not None
                undo = (self.bytes_done, self.lines_done, progress.prefix_sha256, progress.open["digest"], progress.records)
                turn_id = progress.open["turn_id"]
                first_index = tx.reserve_record_indexes(self.session_id, turn_id, len(batch))
                if first_index is None:
                    raise StorageUnavailable("the imported turn is not running; retry the upload")
                first = first_index
                created_at = timestamp(utcnow())
                for offset, (_, item) in enumerate(batch):
                    rows.append(
                        {
                            "record_id": new_id(),
                            "session_id": self.session_id,
                            "record_index": first + offset,
                            "turn_id": turn_id,
                            "turn_index": progress.open["index"],
                            "record_type": item.type,
                            "content": json.dumps(item.payload, separators=(",", ":")),
                            "created_at": created_at,
                        }
                    )
                    progress.open["digest"] = chained(progress.open["digest"], [progress.open["role"], item.type, item.payload])
                progress.records += len(batch)
                if not split:
                    tx.insert_records(rows)
            if close and progress.open is not None and not (split and rows):
                self._close_open(tx)
            self._save(tx)
        if not (split and rows):
            return
        try:
            with self.store.write_records() as records_tx:
                records_tx.insert_records(rows)
        except StorageError as exc:
            with self.store.write() as tx:
                tx.release_record_indexes(self.session_id, rows[0]["turn_id"], first, len(rows))
                self.bytes_done, self.lines_done, progress.prefix_sha256, digest, progress.records = undo
                assert progress.open is not None
                progress.open["digest"] = digest
                self.pending_end = (self.bytes_done, self.lines_done, progress.prefix_sha256)
                self._save(tx)
            raise StorageUnavailable("the records store did not take the imported records; upload again") from exc
        if close and progress.open is not None:
            with self.store.write() as tx:
                self._close_open(tx)
                self._save(tx)

    def _open_turn(self, tx: Transaction, record: RecordLine) -> None:
        assert self.session_id is not None
        turn_id = new_key(self.principal)
        slot = tx.claim_turn_slot(self.session_id, turn_id)
        if slot is None:
            raise ImportInProgress(f"session {self.session_id} has a running turn; finish it before importing more")
        tx.insert_turn(
            {
                "turn_id": turn_id,
                "session_id": self.session_id,
                "turn_index": slot[0],
                "role": record.role,
                "status": "running",
                "first_record_index": slot[1],
                "end_record_index": None,
                "created_at": timestamp(utcnow()),
                "finished_at": None,
            }
        )
        self.progress.open = {"legacy": record.turn, "turn_id": turn_id, "index": slot[0], "role": record.role, "digest": ""}

    def _close_open(self, tx: Transaction) -> None:
        progress = self.progress
        assert progress.open is not None
        tx.finish_turn(progress.open["turn_id"], "completed", timestamp(utcnow()))
        progress.turns.append([progress.open["legacy"], progress.open["digest"], progress.open["turn_id"]])
        progress.own_turns += 1
        progress.open = None

    # ---------------------------------------------------------------- the end
    async def finish(self, size: int, fingerprint: str) -> None:
        if self.progress.matching:
            if self.buffered_turn:
                await run_in_threadpool(self.resolve_buffered, True)
            if self.progress.matching:
                await run_in_threadpool(self._end_matching)
        await run_in_threadpool(self._complete, size, fingerprint)

    def _complete(self, size: int, fingerprint: str) -> None:
        if self.batch or self.progress.open is not None:
            self.flush(close=True)
        self.ensure_session()
        with self.store.write() as tx:
            self.pending_end = (size, max(self.pending_end[1], self.lines_done), fingerprint.split(":", 1)[1])
            self._save(tx, status="complete", fingerprint=fingerprint)

    def summary(self, fingerprint: str, replayed: bool) -> dict[str, Any]:
        progress = self.progress
        return {
            "legacy_id": self.legacy_id,
            "session_id": public_id(self.session_id) if self.session_id else None,
            "parent_session_id": public_id(progress.parent_session_id) if progress.parent_session_id else None,
            "fingerprint": fingerprint,
            "lines": progress.lines,
            "imported_turns": progress.own_turns,
            "imported_records": progress.records,
            "inherited_turns": progress.inherited,
            "skipped": [{"line": number, "reason": reason} for number, reason in progress.skipped],
            "replayed": replayed,
            "resumed_from_line": self.resumed_from,
        }
