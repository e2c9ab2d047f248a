"""Turn recorded exchanges into shell commands anyone can run to see a failure themselves.

Reports are published, so a bearer token is never written out: the command reads it from an
environment variable instead, named as the README says (`SESSION_LINEAGE_TOKEN_PRINCIPAL_1`, ...).
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.results import Exchange

DROPPED_HEADERS = frozenset(
    {"authorization", "host", "content-length", "user-agent", "accept-encoding", "connection"}
)
RESPONSE_EXCERPT_CHARS = 2000
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


TOKEN_ENV_PREFIX = "SESSION_LINEAGE_TOKEN_PRINCIPAL_"
MAX_SCRIPT_STEPS = 300  # a reproducer keeps the first HEAD_STEPS and the last (MAX - HEAD) requests
HEAD_STEPS = 100


def token_variables(tokens: Sequence[str]) -> dict[str, str]:
    """Each configured token mapped to the variable a reproducer reads it from, in configured order."""
    return {token: f"{TOKEN_ENV_PREFIX}{number}" for number, token in enumerate(tokens, start=1)}


def scrub(text: str, variables: Mapping[str, str]) -> str:
    """`text` with every configured token replaced by `$VARIABLE`, for messages that are published."""
    for token in sorted(variables, key=len, reverse=True):
        text = text.replace(token, f"${variables[token]}")
    return text


def to_curl(
    exchange: Exchange, token_env: str = "SESSION_LINEAGE_TOKEN", variables: Mapping[str, str] | None = None
) -> str:
    """A one-line command replaying the request byte for byte, tokens read from the environment.

    Without `variables`, the Authorization header becomes `Bearer $token_env`. With `variables`
    (token -> variable name, see `token_variables`), each configured token, wherever it appears in
    the URL or a header, becomes `${VARIABLE}`, and any other Authorization value (a made-up
    credential a check sends on purpose) is kept as it was sent.

    A body that is not UTF-8, holds a control character (NUL cannot be a shell argument, the rest
    would not survive XML or a terminal) or starts with `@` (which curl would read as a file name)
    is piped in through `base64 -d` instead.
    """
    if not _ENV_NAME.fullmatch(token_env):
        raise ValueError(f"{token_env!r} is not a valid environment variable name")
    for name in (variables or {}).values():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
    parts = ["curl", "-i", "--globoff"]
    parts += ["--head"] if exchange.method.upper() == "HEAD" else ["-X", shlex.quote(exchange.method.upper())]
    parts.append(_word(exchange.url, variables))
    for name, value in exchange.request_headers.items():
        if name.lower() == "authorization" and variables is None:
            parts += ["-H", f'"Authorization: Bearer ${token_env}"']
        elif name.lower() not in DROPPED_HEADERS:
            parts += ["-H", _word(f"{name}: {value}", variables)]
    body = exchange.request_body
    if body is None:
        return " ".join(parts)
    text = _shell_safe_text(body)
    if text is not None:
        return " ".join(parts + ["--data-binary", _word(text, variables)])
    for token, variable in (variables or {}).items():  # never publish a token, even inside raw bytes
        body = body.replace(token.encode(), f"${variable}".encode())
    encoded = base64.b64encode(body).decode("ascii")
    return f"printf %s {shlex.quote(encoded)} | base64 -d | " + " ".join(parts + ["--data-binary", "@-"])


def to_script(
    exchanges: Sequence[Exchange],
    variables: Mapping[str, str],
    title: str,
    failing: Exchange | None = None,
    max_steps: int = MAX_SCRIPT_STEPS,
) -> str:
    """A runnable shell script replaying `exchanges` in order, set-up included, one curl per step.

    It has no `set -e`, so every step runs whatever the target answers; each step says what the
    target answered when the suite sent it. Beyond `max_steps` requests the middle is left out and
    the script says so.
    """
    total = len(exchanges)
    numbered = list(enumerate(exchanges, start=1))
    omitted, gap_before = 0, 0
    if total > max_steps:
        head = min(HEAD_STEPS, max_steps // 3)
        omitted = total - max_steps
        numbered = numbered[:head] + numbered[head + omitted :]
        gap_before = numbered[head][0]
    used = [v for v in dict.fromkeys(variables.values()) if any(_mentions(e, variables, v) for e in exchanges)]
    lines = [
        "#!/bin/sh",
        f"# {_comment(title)}",
        f"# {total} request{'s' if total != 1 else ''} in the order the suite sent them, set-up included"
        + ("; the last one is the failing request." if failing is not None else "; the check failed after the last."),
        "# Requests the suite sent concurrently run here one after another.",
        "# No `set -e`: every step runs, whatever it answers.",
    ]
    if used:
        lines.append("# Set the tokens first: " + " ".join(f"{name}=..." for name in used))
    for number, exchange in numbered:
        if number == gap_before:
            lines += ["", f"# ... {omitted} requests left out here (truncated: a reproducer keeps {max_steps}) ..."]
        answered = "no answer" if exchange.status is None else f"answered {exchange.status}"
        marker = " (the failing request)" if failing is not None and exchange is failing else ""
        label = f"step {number} of {total}: {exchange.method.upper()} {_path(exchange.url)}, {answered}{marker}"
        lines += ["", f"echo {shlex.quote('== ' + printable(label))}", to_curl(exchange, variables=variables)]
    return "\n".join(lines) + "\n"


def exchange_from_schemathesis(response: Any, variables: Mapping[str, str] | None = None) -> Exchange:
    """An Exchange from a Schemathesis response (its `request` is a `requests.PreparedRequest`),
    so requests generated by the fuzz layer replay like the suite's own."""
    request = response.request
    body = request.body
    if isinstance(body, str):
        body = body.encode("utf-8")
    headers = {str(name): str(value) for name, value in dict(request.headers).items()}
    principal = None
    for token, variable in (variables or {}).items():
        if token in headers.get("Authorization", ""):
            principal = "principal-" + variable.removeprefix(TOKEN_ENV_PREFIX)
    return Exchange(
        method=str(request.method).upper(),
        url=str(request.url),
        request_headers=headers,
        request_body=body,
        status=response.status_code,
        response_headers={name: ", ".join(values) for name, values in response.headers.items()},
        response_body=response.content or b"",
        principal=principal,
        elapsed_ms=float(response.elapsed) * 1000,
    )


def _word(text: str, variables: Mapping[str, str] | None) -> str:
    """One shell word for `text`: single-quoted, or double-quoted with `${VAR}` for each token in it."""
    if not variables or not any(token in text for token in variables):
        return shlex.quote(text)
    pattern = re.compile("|".join(re.escape(token) for token in sorted(variables, key=len, reverse=True)))
    pieces, position = [], 0
    for match in pattern.finditer(text):
        pieces.append(_double_quote_escape(text[position : match.start()]))
        pieces.append("${" + variables[match.group()] + "}")
        position = match.end()
    pieces.append(_double_quote_escape(text[position:]))
    return '"' + "".join(pieces) + '"'


def _double_quote_escape(text: str) -> str:
    return re.sub(r'([\\"$`])', r"\\\1", text)


def _mentions(exchange: Exchange, variables: Mapping[str, str], variable: str) -> bool:
    tokens = [token for token, name in variables.items() if name == variable]
    texts = [exchange.url, *exchange.request_headers.values()]
    return any(token in text for token in tokens for text in texts)


def _path(url: str) -> str:
    match = re.match(r"^[a-z]+://[^/]+(.*)$", url)
    return (match.group(1) if match else url) or "/"


def _comment(text: str) -> str:
    return printable(text).replace("\n", " ")


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


__all__ = [
    "to_curl",
    "to_script",
    "token_variables",
    "scrub",
    "exchange_from_schemathesis",
    "describe_response",
    "printable",
]
