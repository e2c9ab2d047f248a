"""Mutants: three-state members (absent, null, empty string, a value) read as two states."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp

from reference_impl.settings import Settings
from tests.mutants import mutant, reference_app
from tests.mutants.sessions import rewrite_requests


def _empty_as_null(members: dict[str, Any]) -> dict[str, Any]:
    return {key: (None if value == "" else value) for key, value in members.items()}


@mutant("SESS-CREATE-001", select=("sessions.create_three_state",),
        description="An empty name or description at creation is stored as null")
def empty_name_stored_as_null(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        if scope["method"] == "POST" and scope["path"] == "/sessions" and body:
            data = json.loads(body)
            if isinstance(data, dict):
                body = json.dumps(_empty_as_null(data)).encode()
        return scope, body

    return rewrite_requests(reference_app(settings), rewrite)


@mutant("FORK-HEADER-001", select=("fork.header_three_state",),
        description="An empty name or description in a fork's header clears it instead of setting it")
def empty_header_clears(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        if scope["method"] == "POST" and scope["path"].endswith("/fork") and body:
            data = json.loads(body)
            if isinstance(data, dict) and isinstance(data.get("header"), dict):
                body = json.dumps({**data, "header": _empty_as_null(data["header"])}).encode()
        return scope, body

    return rewrite_requests(reference_app(settings), rewrite)
