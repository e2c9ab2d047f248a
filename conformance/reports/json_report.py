"""The machine-readable report: everything a dashboard or a later comparison needs, in one document.

Its shape is fixed by `conformance/report.schema.json`, so consumers can validate what they read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from conformance.curl import describe_response
from conformance.results import CheckResult, RunResult

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "report.schema.json"
# The report format's version (the schema's `format_version`): a minor version only adds members and
# enumeration values (1.1.0: the outcome `not-verified`); a report without one is 1.0.0.
FORMAT_VERSION = "1.1.0"


def report_document(result: RunResult) -> dict[str, Any]:
    """The report as plain JSON data, matching `SCHEMA_PATH`."""
    return {
        "format_version": FORMAT_VERSION,
        "suite_version": result.suite_version,
        "spec_version": result.spec_version,
        "target": result.target,
        "seed": result.seed,
        "started_at": result.started_at,
        "duration_s": result.duration_s,
        "strict": result.strict,
        "verdict": result.verdict.value,
        "exit_code": result.exit_code,
        "summary_text": result.summary,
        "claim": dict(result.claim) or None,
        "profiles": [
            {
                "name": profile.name,
                "version": profile.version,
                "title": profile.title,
                "claimed": profile.claimed,
                "status": profile.status,
                "reached": profile.reached,
                "missing_capabilities": list(profile.missing_capabilities),
                "failed_requirements": list(profile.failed_requirements),
                "undetermined_requirements": list(profile.undetermined_requirements),
                "not_verified_requirements": list(profile.not_verified_requirements),
                "requirements": profile.requirements,
            }
            for profile in result.profiles
        ],
        "preflight": [{"name": item.name, "status": item.status, "message": item.message} for item in result.preflight],
        "config": result.config,
        "capabilities": result.capabilities,
        "summary": {
            **result.counts(),
            "checks": len(result.checks),
            "requirements": result.requirement_counts(),
        },
        "requirements": [
            {
                "id": verdict.id,
                "level": verdict.level,
                "chapter": verdict.chapter,
                "title": verdict.title,
                "outcome": verdict.outcome.value,
                "checks": list(verdict.checks),
                "in_scope": verdict.in_scope,
                "reason": verdict.reason,
                "link": verdict.link,
            }
            for verdict in result.requirements
        ],
        "deployment_only": [dict(item) for item in result.deployment_only],
        "checks": [_check(check) for check in result.checks],
        "cleanup": _cleanup(result),
        "notes": list(result.notes),
    }


def write_json(result: RunResult, path: str | os.PathLike[str]) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report_document(result), indent=2, default=str)
    target.write_text(text + "\n", encoding="utf-8")


def _check(check: CheckResult) -> dict[str, Any]:
    return {
        "name": check.name,
        "title": check.title,
        "chapter": check.chapter,
        "requirements": list(check.requirements),
        "outcome": check.outcome.value,
        "level": check.level,
        "message": check.message,
        "failed_requirements": list(check.failed_requirements),
        "reason": check.reason,
        "link": check.link,
        "untestable": check.untestable,
        "duration_ms": check.duration_ms,
        "seed": check.seed,
        "reproducer": check.reproducer,
        "response": describe_response(check.exchange) if check.exchange else None,
        "details": check.details,
    }


def _cleanup(result: RunResult) -> dict[str, Any] | None:
    cleanup = result.cleanup
    if cleanup is None:
        return None
    return {
        "prefix": cleanup.prefix,
        "created": len(cleanup.sessions),
        "removed": list(cleanup.removed),
        "left_behind": cleanup.left_behind,
        "kept": cleanup.kept,
        "note": cleanup.note,
    }


__all__ = ["report_document", "write_json", "SCHEMA_PATH"]
