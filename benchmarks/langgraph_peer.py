"""The real peer: a LangGraph agent thread on its SQLite checkpointer, driven like an agent would.

Installed only for benchmarks (`pip install -e '.[bench]'`). Every statement the checkpointer sends
is counted through SQLite's trace callback; transaction control is not counted, as on our side.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


def available() -> str | None:
    """The installed LangGraph version, or None when the benchmark extra is not installed."""
    try:
        from importlib.metadata import version

        import langgraph  # noqa: F401
        from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: F401

        return version("langgraph")
    except Exception:  # any import problem means: not available
        return None


@dataclass
class Counter:
    statements: int = 0
    sql: list[str] = field(default_factory=list)

    def __call__(self, statement: str) -> None:
        if not statement.lstrip()[:16].upper().startswith(_CONTROL):
            self.statements += 1


class LangGraphThread:
    """One conversation as a LangGraph thread: each turn is a user message and the agent's reply.

    The graph is the smallest agent there is (one node appending the assistant message), so what
    is measured is the checkpointer, which is what stores, forks and reads the history.
    """

    def __init__(self, where: str, content_bytes: int, engine: str = "sqlite") -> None:
        """`where`: a SQLite file path, or with `engine="postgresql"` a database URL (the
        checkpointer's tables are created there)."""
        from langchain_core.messages import AIMessage
        from langgraph.graph import END, START, MessagesState, StateGraph

        self.engine = engine
        self.path = where
        self.content_bytes = content_bytes
        self.counter = Counter()
        if engine == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            self.conn: Any = sqlite3.connect(where, check_same_thread=False)
            self.conn.set_trace_callback(self.counter)
            saver: Any = SqliteSaver(self.conn)
        else:
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row

            self.conn = psycopg.connect(
                where, autocommit=True, prepare_threshold=0, row_factory=dict_row, cursor_factory=_counting_cursor()
            )
            self.conn.lineage_counter = self.counter
            saver = PostgresSaver(self.conn)
            saver.setup()
            self.counter.statements = 0

        def assistant(state: MessagesState) -> dict[str, Any]:
            said = str(state["messages"][-1].content)  # "u<turn>:...": the reply carries the turn's number
            return {"messages": [AIMessage(content=text("a", int(said[1 : said.index(":")]), content_bytes))]}

        graph = StateGraph(MessagesState)
        graph.add_node("assistant", assistant)
        graph.add_edge(START, "assistant")
        graph.add_edge("assistant", END)
        self.graph = graph.compile(checkpointer=saver)
        self.config: dict[str, Any] = {"configurable": {"thread_id": "bench"}}

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def counted(self) -> Iterator[Counter]:
        """Statements sent inside the block."""
        before = self.counter.statements
        result = Counter()
        yield result
        result.statements = self.counter.statements - before

    def turn(self, number: int, config: dict[str, Any] | None = None) -> dict[str, Any]:
        """One user message and the agent's reply (one `invoke`); returns the new head's config."""
        from langchain_core.messages import HumanMessage

        state = self.graph.invoke(
            {"messages": [HumanMessage(content=text("u", number, self.content_bytes))]}, config or self.config
        )
        assert state["messages"]
        return self.graph.get_state(self.config).config  # the thread's newest checkpoint: the branch head after a fork

    def load(self, turns: int) -> None:
        """The thread of `turns` turns in one state update: a single checkpoint holding every
        message, which is exactly what `read_all` loads (building it turn by turn writes a full
        copy per checkpoint and takes minutes at 1,000 turns)."""
        from langchain_core.messages import AIMessage, HumanMessage

        messages: list[Any] = []
        for number in range(turns):
            messages.append(HumanMessage(content=text("u", number, self.content_bytes)))
            messages.append(AIMessage(content=text("a", number, self.content_bytes)))
        self.graph.update_state(self.config, {"messages": messages}, as_node="assistant")

    def find_turn(self, turns_before: int) -> dict[str, Any]:
        """The checkpoint just after `turns_before` completed turns, found the only way the API
        offers without stored ids: walking the state history back from the newest checkpoint."""
        wanted = 2 * turns_before
        for snapshot in self.graph.get_state_history(self.config):
            if len(snapshot.values.get("messages", [])) == wanted and not snapshot.next:
                return snapshot.config
        raise LookupError(f"no checkpoint after {turns_before} turns")

    def read_all(self, config: dict[str, Any] | None = None) -> list[str]:
        """The whole conversation as the agent reads it: the newest checkpoint's messages."""
        state = self.graph.get_state(config or self.config)
        return [message.content for message in state.values["messages"]]

    def size_bytes(self) -> int:
        if self.engine != "sqlite":
            row = self.conn.execute(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) AS size FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
            ).fetchone()
            return int(row["size"])
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        page_size = self.conn.execute("PRAGMA page_size").fetchone()[0]
        return int(pages * page_size) if pages else os.path.getsize(self.path)


def _counting_cursor() -> type:
    import psycopg

    class CountingCursor(psycopg.Cursor):  # type: ignore[misc]
        """Counts every statement the PostgreSQL checkpointer sends (an executemany sends one per row)."""

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            self._count(query, 1)
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            rows = list(params_seq)
            self._count(query, len(rows))
            return super().executemany(query, rows, **kwargs)

        def _count(self, query: Any, times: int) -> None:
            counter = getattr(self.connection, "lineage_counter", None)
            if counter is not None:
                for _ in range(times):
                    counter(query if isinstance(query, str) else "statement")

    return CountingCursor


def text(prefix: str, number: int, size: int) -> str:
    """Message text of exactly `size` bytes, different for every turn."""
    head = f"{prefix}{number}:"
    return (head + "x" * size)[:size]
