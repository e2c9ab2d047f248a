"""Chapter: legacy import (capability `legacy-import`).

`POST /imports` streams a legacy single-file JSONL history (a `session_meta` line, then one record
per line) into one session: consecutive lines with the same `turn_id` are one turn. The upload is
read line by line with bounded memory; malformed, oversized and truncated lines are skipped and
reported by line number. Progress is committed in batches with the records, so a re-upload of the
same file continues after the last line imported; a file imported completely is replayed, not
imported again (its fingerprint: size and SHA-256). When the meta line names a parent, the parent
must have been imported first; the leading turns the child copied from it are inherited through a
fork instead of being imported again.

Here: reading the upload and writing the session. The import's row (its claim and saved progress)
is legacy_progress.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool

from reference_impl.errors import ImportInProgress, InvalidLegacyHistory, LegacyConflict, StorageUnavailable
from reference_impl.legacy_lines import Line, LineReader, RecordLine, parse_meta, parse_record
from reference_impl.principals import Caller, public_id
from reference_impl.services import turn_steps as steps
from reference_impl.services.common import ChapterService, timestamp, utcnow
from reference_impl.services.fork import ForkService
from reference_impl.services.legacy_progress import CLAIM_SECONDS, ImportProgress, Progress, chained
from reference_impl.store import Transaction

BATCH_RECORDS = 100
ID_NAMESPACE = uuid.UUID("6f1c1c1e-8a59-4d7c-9a55-6b2b3f2f6a10")


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


class ImportJob(ImportProgress):
    """One upload: its lines read in order, its records written in batches with the progress."""

    def __init__(self, service: ImportService, principal: str, lease_id: str | None) -> None:
        super().__init__(service, principal, lease_id)
        self.batch: list[tuple[int, RecordLine]] = []
        self.buffered_turn: list[tuple[int, RecordLine]] = []  # while matching the parent's turns

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
                items = [(item.type, json.dumps(item.payload, separators=(",", ":"))) for _, item in batch]
                rows = steps.record_rows(
                    self.session_id, turn_id, progress.open["index"], first, items, timestamp(utcnow()),
                    progress.open.get("token"),  # absent from an import begun before derived ids: ids made afresh
                )
                for _, item in batch:
                    progress.open["digest"] = chained(progress.open["digest"], [progress.open["role"], item.type, item.payload])
                progress.records += len(batch)
                if not split:
                    tx.insert_records(rows)
            if close and progress.open is not None and not (split and rows):
                self._close_open(tx)
            self._save(tx)
        if not (split and rows):
            return

        def give_back(tx: Transaction) -> bool:
            assert self.session_id is not None and progress.open is not None
            tx.release_record_indexes(self.session_id, rows[0]["turn_id"], first, len(rows))
            self.bytes_done, self.lines_done, progress.prefix_sha256, progress.open["digest"], progress.records = undo
            self.pending_end = (self.bytes_done, self.lines_done, progress.prefix_sha256)
            self._save(tx)
            return True

        steps.insert_or_give_back(self.store, rows, give_back, "the records store did not take the imported records; upload again")
        if close and progress.open is not None:
            with self.store.write() as tx:
                self._close_open(tx)
                self._save(tx)

    def _open_turn(self, tx: Transaction, record: RecordLine) -> None:
        assert self.session_id is not None
        turn = steps.open_turn(tx, self.session_id, None, record.role)
        if turn is None:
            raise ImportInProgress(f"session {self.session_id} has a running turn; finish it before importing more")
        self.progress.open = {
            "legacy": record.turn, "turn_id": turn.turn_id, "index": turn.turn_index, "role": record.role, "digest": "",
            "token": turn.token,
        }

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


__all__ = ["BATCH_RECORDS", "CLAIM_SECONDS", "ID_NAMESPACE", "ImportJob", "ImportProgress", "ImportService", "Progress", "chained"]
