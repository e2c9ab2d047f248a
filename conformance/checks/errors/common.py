"""What several error modules use: a session with a running turn, and requests sent as exact bytes."""

from __future__ import annotations

import httpx

from conformance.checks import wire
from conformance.context import CheckContext
from conformance.results import Exchange


def session_with_running_turn(ctx: CheckContext) -> tuple[str, str, str]:
    """A session with one finished and one running turn: every write endpoint has a target."""
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    turn = ctx.start_turn(sid)
    return sid, turn["turn_id"], f"/sessions/{sid}/turns/{turn['turn_id']}"


def send_bytes(ctx: CheckContext, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b"",
               authorize: bool = True) -> tuple[wire.RawAnswer, Exchange]:
    """Send one request as exact bytes (alice's token first unless `authorize` is false)."""
    host = httpx.URL(ctx.config.target).netloc.decode()
    sent = ([(b"Authorization", f"Bearer {ctx.alice.token}".encode())] if authorize else []) + headers
    data = wire.request_bytes(method, path, host, sent, body)
    answer = wire.send_raw(ctx.config.target, data, ctx.config.timeout)
    exchange = wire.exchange_of(ctx.config.target, data, answer, ctx.alice.principal if authorize else None)
    ctx.alice.recorder.add(exchange)
    return answer, exchange
