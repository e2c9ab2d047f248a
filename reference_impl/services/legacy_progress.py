"""Legacy import, its row: who holds an import (the claim) and how far it got (the progress).

Split from legacy_import.py, which reads the upload and writes the session: here is only what an
upload saves so that another one continues after it, and the claim that keeps two uploads of one
history from importing at once.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from reference_impl.canonical import canonical
from reference_impl.errors import ImportInProgress, LegacyParentMissing
from reference_impl.legacy_lines import Line
from reference_impl.services.common import timestamp, utcnow
from reference_impl.store import Transaction
from reference_impl.store.store import IntegrityError, StorageError

if TYPE_CHECKING:
    from reference_impl.services.legacy_import import ImportService

CLAIM_SECONDS = 60


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
    def load(cls, text: str) -> Progress:
        return cls(**json.loads(text)) if text else cls()


class ImportProgress:
    """One upload's hold on its history's row, and the progress it saves there."""

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
        self.pending_end: tuple[int, int, str] = (0, 0, Progress().prefix_sha256)  # bytes, lines, digest reached

    # ---------------------------------------------------------------- the claim
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
            # The row as the claim took it: another upload may have finished (and let go) since `row` was read.
            row = tx.claim_legacy_import(str(self.principal), self.legacy_id, claim, timestamp(now))
            if row is None:
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

    # ---------------------------------------------------------------- the progress
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
