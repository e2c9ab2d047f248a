"""RFC 9457 problem responses; kinds, statuses and titles come from spec/problem-types.yaml."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

import spec

PROBLEM_MEDIA_TYPE = "application/problem+json"


def problem(
    kind: str, detail: str, headers: Mapping[str, str] | None = None, members: Mapping[str, Any] | None = None
) -> JSONResponse:
    entry = spec.load_yaml(spec.PROBLEM_TYPES_PATH)["types"][kind]
    body: dict[str, Any] = {
        **(members or {}),  # extension members (RFC 9457 section 3.2), e.g. `missing_capabilities`
        "type": spec.problem_type_uri(kind),
        "title": entry["title"],
        "status": entry["status"],
        "detail": detail,
    }
    return JSONResponse(
        body, status_code=entry["status"], media_type=PROBLEM_MEDIA_TYPE, headers=headers
    )
