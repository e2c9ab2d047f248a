"""Transactions of the reference implementation: every chapter's statements on one connection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError as StorageError
from sqlalchemy.exc import IntegrityError

from reference_impl.store.attachments import AttachmentStatements
from reference_impl.store.context import ContextStatements
from reference_impl.store.deletion import DeletionStatements
from reference_impl.store.engine import writer_gate
from reference_impl.store.export import ExportStatements
from reference_impl.store.fork import ForkStatements
from reference_impl.store.grants import GrantStatements
from reference_impl.store.legacy_import import LegacyImportStatements
from reference_impl.store.leases import LeaseStatements
from reference_impl.store.revert import RevertStatements
from reference_impl.store.session_patch import SessionPatchStatements
from reference_impl.store.listing import ListingStatements
from reference_impl.store.rollout import RolloutStatements
from reference_impl.store.sessions import SessionStatements
from reference_impl.store.suspend import SuspendStatements
from reference_impl.store.transcript import TranscriptStatements
from reference_impl.store.turn_writes import TurnWriteStatements

__all__ = ["Store", "Transaction", "IntegrityError", "StorageError"]


class Transaction(
    SessionStatements,
    ForkStatements,
    TranscriptStatements,
    LeaseStatements,
    GrantStatements,
    ListingStatements,
    AttachmentStatements,
    DeletionStatements,
    TurnWriteStatements,
    RolloutStatements,
    ContextStatements,
    ExportStatements,
    RevertStatements,
    SessionPatchStatements,
    SuspendStatements,
    LegacyImportStatements,
):
    """The statements available inside one read or write transaction: one base class per chapter."""


class Store:
    """Opens transactions; the service layer decides what happens inside them.

    With `records_engine`, records live in a second store: reads open it on first use, and
    record writes go through `write_records()`, a transaction of their own. `transaction_class`
    lets tests substitute the statements (for example, to inject faults).
    """

    def __init__(
        self,
        engine: Engine,
        records_engine: Engine | None = None,
        transaction_class: type[Transaction] = Transaction,
    ) -> None:
        self.engine = engine
        self.records_engine = records_engine
        self.transaction_class = transaction_class

    @property
    def split(self) -> bool:
        return self.records_engine is not None

    @property
    def local_reads(self) -> bool:
        """Whether a read is work in this process only: every database is SQLite, in WAL mode, where
        a read neither waits for a writer nor goes over a network (engine.py)."""
        return all(engine.dialect.name == "sqlite" for engine in (self.engine, self.records_engine) if engine is not None)

    @contextmanager
    def read(self) -> Iterator[Transaction]:
        """A read. On SQLite, one snapshot (`BEGIN`). On PostgreSQL, each statement sees the data
        committed when it starts, as a READ COMMITTED transaction's statements do; it runs in
        autocommit, which gives that without the BEGIN and COMMIT round trips. A statement that
        streams its rows gets a transaction of its own (`Statements.stream_conn`)."""
        with ExitStack() as stack:
            conn = stack.enter_context(self.engine.connect())
            autocommit = conn.dialect.name == "postgresql"
            if autocommit:
                conn.execution_options(isolation_level="AUTOCOMMIT")
            stack.enter_context(conn.begin())
            yield self.transaction_class(
                conn, self._records_opener(stack), records_apart=self.split,
                stream_conn=self._opener(stack, self.engine) if autocommit else None,
            )

    @contextmanager
    def write(self) -> Iterator[Transaction]:
        with writer_gate(self.engine), self.engine.connect().execution_options(write=True) as conn, conn.begin():
            yield self.transaction_class(conn)

    @contextmanager
    def write_records(self) -> Iterator[Transaction]:
        """A transaction on the records store (the core store when there is only one)."""
        engine = self.records_engine or self.engine
        with writer_gate(engine), engine.connect().execution_options(write=True) as conn, conn.begin():
            yield self.transaction_class(conn, conn, records_apart=self.split)

    @staticmethod
    def _opener(stack: ExitStack, engine: Engine) -> Callable[[], Connection]:
        """A connection of `engine` in a transaction, opened when first asked for and closed with the read."""

        def open_connection() -> Connection:
            conn = stack.enter_context(engine.connect())
            stack.enter_context(conn.begin())
            return conn

        return open_connection

    def _records_opener(self, stack: ExitStack) -> Callable[[], Connection] | None:
        return None if self.records_engine is None else self._opener(stack, self.records_engine)
