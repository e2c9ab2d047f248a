"""Turn a recorded exchange into a shell command anyone can paste to see the failure themselves.

Reports are published, so a bearer token is never written out: the command reads it from an
environment variable instead.
"""

from __future__ import annotations

import base64
import re
import shlex

from conformance.results import Exchange

DROPPED_HEADERS = frozenset(
    {"authorization", "host", "content-length", "user-agent", "accept-encoding", "connection"}
)
RESPONSE_EXCERPT_CHARS = 2000
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def to_curl(exchange: Exchange, token_env: str = "SESSION_LINEAGE_TOKEN") -> str:
    """A one-line command replaying the request byte for byte, with the token taken from `$token_env`.

    A body that is not UTF-8, holds a control character (NUL cannot be a shell argument, the rest
    would not survive XML or a terminal) or starts with `@` (which curl would read as a file name)
    is piped in through `base64 -d` instead.
    """
    if not _ENV_NAME.fullmatch(token_env):
        raise ValueError(f"{token_env!r} is not a valid environment variable name")
    parts = ["curl", "-i", "--globoff"]
    parts += ["--head"] if exchange.method.upper() == "HEAD" else ["-X", shlex.quote(exchange.method.upper())]
    parts.append(shlex.quote(exchange.url))
    for name, value in exchange.request_headers.items():
        if name.lower() == "authorization":
            parts += ["-H", f'"Authorization: Bearer ${token_env}"']
        elif name.lower() not in DROPPED_HEADERS:
            parts += ["-H", shlex.quote(f"{name}: {value}")]
    body = exchange.request_body
    if body is None:
        return " ".join(parts)
    text = _shell_safe_text(body)
    if text is not None:
        return " ".join(parts + ["--data-binary", shlex.quote(text)])
    encoded = base64.b64encode(body).decode("ascii")
    return f"printf %s {shlex.quote(encoded)} | base64 -d | " + " ".join(parts + ["--data-binary", "@-"])


def describe_response(exchange: Exchange) -> str:
    """The status line and the start of the body: what the target answered, short enough to publish."""
    if exchange.status is None:
        return "no response"
    head = f"HTTP {exchange.status}"
    body = printable(exchange.response_body.decode("utf-8", errors="replace"))
    if not body:
        return head
    excerpt = body[:RESPONSE_EXCERPT_CHARS]
    if len(body) > RESPONSE_EXCERPT_CHARS:
        excerpt += f"\n[{len(body) - RESPONSE_EXCERPT_CHARS} more characters]"
    return f"{head}\n{excerpt}"


def printable(text: str) -> str:
    """Show control characters (except tab and newline) as escapes, so target-controlled text can
    neither rewrite a terminal nor make XML invalid."""
    return _UNPRINTABLE.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def _shell_safe_text(body: bytes) -> str | None:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _UNPRINTABLE.search(text) or text.startswith("@"):
        return None
    return text


__all__ = ["to_curl", "describe_response", "printable"]
