"""Turn recorded exchanges into shell commands anyone can run to see a failure themselves.

Reports are published, so a bearer token is never written out: the command reads it from an
environment variable instead, named as the README says (`SESSION_LINEAGE_TOKEN_PRINCIPAL_1`, ...).
"""

from __future__ import annotations

import base64
import json
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
MIN_SCRUB_LENGTH = 8  # shorter tokens are replaced only where they appear as a bearer credential


def token_variables(tokens: Sequence[str]) -> dict[str, str]:
    """Each configured token mapped to the variable a reproducer reads it from, in configured order."""
    return {token: f"{TOKEN_ENV_PREFIX}{number}" for number, token in enumerate(tokens, start=1)}


def scrub(text: str, variables: Mapping[str, str]) -> str:
    """`text` with every configured token replaced by `$VARIABLE`, for messages that are published."""
    for token in sorted(variables, key=len, reverse=True):
        if len(token) >= MIN_SCRUB_LENGTH:
            text = text.replace(token, f"${variables[token]}")
        else:  # a short token is only recognisable where it is used as one
            text = text.replace(f"Bearer {token}", f"Bearer ${variables[token]}")
    return text


def to_curl(
    exchange: Exchange,
    token_env: str = "SESSION_LINEAGE_TOKEN",
    variables: Mapping[str, str] | None = None,
    body_file: str | None = None,
) -> str:
    """A one-line command replaying the request byte for byte, tokens read from the environment.

    Without `variables`, the Authorization header becomes `Bearer $token_env`. With `variables`
    (text -> variable name: the tokens of `token_variables`, and in scripts ids that change from
    run to run), each such text of 8 characters or more, wherever it appears, becomes
    `${VARIABLE}`; a token of any length does in the Authorization header, and any other
    Authorization value (a made-up credential a check sends on purpose) is kept as it was sent.
    With `body_file` (a shell word), curl prints the response headers and saves the body there.

    A body that is not UTF-8, holds a control character (NUL cannot be a shell argument, the rest
    would not survive XML or a terminal) or starts with `@` (which curl would read as a file name)
    is piped in through `base64 -d` instead.
    """
    if not _ENV_NAME.fullmatch(token_env):
        raise ValueError(f"{token_env!r} is not a valid environment variable name")
    for name in (variables or {}).values():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
    parts = ["curl", "-i", "--globoff"] if body_file is None else ["curl", "-sS", "--globoff", "-D", "-", "-o", body_file]
    parts += ["--head"] if exchange.method.upper() == "HEAD" else ["-X", shlex.quote(exchange.method.upper())]
    parts.append(_word(exchange.url, variables))
    for name, value in exchange.request_headers.items():
        if name.lower() == "authorization":
            parts += ["-H", _authorization(value, token_env, variables)]
        elif name.lower() not in DROPPED_HEADERS:
            parts += ["-H", _word(f"{name}: {value}", variables)]
    body = exchange.request_body
    if body is None:
        return " ".join(parts)
    text = _shell_safe_text(body)
    if text is not None:
        return " ".join(parts + ["--data-binary", _word(text, variables)])
    for token in _secret_tokens(variables or {}):  # never publish a token, even inside raw bytes
        body = body.replace(token.encode(), f"${(variables or {})[token]}".encode())
    encoded = base64.b64encode(body).decode("ascii")
    return f"printf %s {shlex.quote(encoded)} | base64 -d | " + " ".join(parts + ["--data-binary", "@-"])


def to_script(
    exchanges: Sequence[Exchange],
    variables: Mapping[str, str],
    title: str,
    failing: Exchange | None = None,
    prefix: str | None = None,
    max_steps: int = MAX_SCRIPT_STEPS,
) -> str:
    """A runnable shell script replaying `exchanges` in order, set-up included, one curl per step.

    Every run of the script is a fresh replay: the run's id `prefix` becomes `$P`, a new prefix per
    run, and an id the target chose (read from an earlier answer) is read from the replay's own
    answer (with python3). There is no `set -e`, so every step runs whatever it answers; each step
    says what the target answered to the suite. Beyond `max_steps` requests the middle is left out
    and the script says so.
    """
    total = len(exchanges)
    numbered = list(enumerate(exchanges, start=1))
    omitted, gap_before = 0, 0
    if total > max_steps:
        head = min(HEAD_STEPS, max_steps // 3)
        omitted = total - max_steps
        numbered = numbered[:head] + numbered[head + omitted :]
        gap_before = numbered[head][0]
    words = dict(variables)
    requests = [_request_text(exchange) for _, exchange in numbered]
    uses_prefix = bool(prefix) and len(prefix or "") >= MIN_SCRUB_LENGTH and any(prefix in text for text in requests)
    if uses_prefix:
        words[str(prefix)] = "P"
    extractions = _server_chosen_ids(numbered, requests, words)
    steps: list[str] = []
    for position, (number, exchange) in enumerate(numbered):
        if number == gap_before:
            steps += ["", f"# ... {omitted} requests left out here (truncated: a reproducer keeps {max_steps}) ..."]
        answered = "no answer" if exchange.status is None else f"answered {exchange.status}"
        marker = " (the failing request)" if failing is not None and exchange is failing else ""
        label = f"step {number} of {total}: {exchange.method.upper()} {_path(exchange.url)}; the suite saw it {answered}{marker}"
        steps += [
            "",
            f"echo {_word('== ' + printable(label), words)}",
            to_curl(exchange, variables=words, body_file='"$B"') + '; cat "$B"; echo',
        ]
        for value, (name, path) in extractions.get(position, {}).items():
            steps.append(f"{name}=$(field {' '.join(shlex.quote(str(part)) for part in path)})")
            words[value] = name
    body = "\n".join(steps)
    used = [name for name in dict.fromkeys(variables.values()) if "${" + name + "}" in body]
    lines = [
        "#!/bin/sh",
        f"# {_comment(title)}",
        f"# {total} request{'s' if total != 1 else ''} in the order the suite sent them, set-up included"
        + ("; the last one is the failing request." if failing is not None else "; the check failed after the last."),
        "# Requests the suite sent concurrently run here one after another. No `set -e`: every step runs.",
    ]
    if used:
        lines.append("# Export the tokens first (see the README): " + ", ".join(used))
    if uses_prefix:
        lines.append(f"# Ids the suite chose get a fresh prefix on every run (they had {prefix}).")
        lines.append('P="slc-r$(date +%s)-$$-"')
    lines.append('B=$(mktemp) && trap \'rm -f "$B"\' EXIT')
    if extractions:
        lines += [
            "# Ids the target chose are read from its answers: field KEY... prints one from the last body.",
            "field() { python3 -c 'import json, sys",
            "value = json.load(open(sys.argv[1]))",
            "for key in sys.argv[2:]: value = value[int(key)] if isinstance(value, list) else value[key]",
            """print(value)' "$B" "$@"; }""",
        ]
    lines.append(body)
    return "\n".join(lines) + "\n"


def _request_text(exchange: Exchange) -> str:
    body = (exchange.request_body or b"").decode("utf-8", errors="replace")
    return "\n".join([exchange.url, *exchange.request_headers.values(), body])


def _server_chosen_ids(
    numbered: Sequence[tuple[int, Exchange]], requests: Sequence[str], known: Mapping[str, str]
) -> dict[int, dict[str, tuple[str, list[str | int]]]]:
    """Strings the target chose (ids, cursors) that later requests send back: for each step, the
    value, the variable that holds it and its path in that step's JSON answer."""
    joined = "\n\x00".join(requests)
    starts, offset = [], 0
    for text in requests:
        starts.append(offset)
        offset += len(text) + 2
    found: dict[int, dict[str, tuple[str, list[str | int]]]] = {}
    seen: set[str] = set()
    counter = 0
    for position, (_, exchange) in enumerate(numbered):
        sent_so_far = joined[: starts[position] + len(requests[position])]
        for value, path in _strings(exchange.response_body):
            if value in seen or len(value) < MIN_SCRUB_LENGTH or any(word in value for word in known):
                continue
            seen.add(value)
            if value in sent_so_far or position + 1 >= len(requests):
                continue  # the suite sent it first: not the target's choice
            if joined.find(value, starts[position + 1]) < 0:
                continue
            counter += 1
            found.setdefault(position, {})[value] = (f"ID{counter}", path)
    return found


def _strings(body: bytes) -> list[tuple[str, list[str | int]]]:
    """Every string in a JSON body with its path, first occurrence first."""
    try:
        document = json.loads(body) if body else None
    except ValueError:
        return []
    found: list[tuple[str, list[str | int]]] = []

    def walk(node: Any, path: list[str | int]) -> None:
        if isinstance(node, str):
            found.append((node, path))
        elif isinstance(node, dict):
            for key, child in node.items():
                walk(child, [*path, key])
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, [*path, index])

    walk(document, [])
    return found


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


def _authorization(value: str, token_env: str, variables: Mapping[str, str] | None) -> str:
    """The Authorization header as a shell word: a configured token as its variable, anything else
    (a made-up credential a check sends on purpose) as it was sent."""
    if variables is None:
        return f'"Authorization: Bearer ${token_env}"'
    scheme, _, credential = value.partition(" ")
    if credential in variables:
        return f'"Authorization: {_double_quote_escape(scheme)} ${{{variables[credential]}}}"'
    return _word(f"Authorization: {value}", variables)


def _secret_tokens(variables: Mapping[str, str]) -> list[str]:
    """Texts long enough to search for inside other text (a 2-character test token would match
    inside ordinary words); the Authorization header is matched exactly whatever the length."""
    return sorted((token for token in variables if len(token) >= MIN_SCRUB_LENGTH), key=len, reverse=True)


def _word(text: str, variables: Mapping[str, str] | None) -> str:
    """One shell word for `text`: single-quoted, or double-quoted with `${VAR}` for each token in it."""
    tokens = _secret_tokens(variables or {})
    if not tokens or not any(token in text for token in tokens):
        return shlex.quote(text)
    pattern = re.compile("|".join(re.escape(token) for token in tokens))
    pieces, position = [], 0
    for match in pattern.finditer(text):
        pieces.append(_double_quote_escape(text[position : match.start()]))
        pieces.append("${" + variables[match.group()] + "}")
        position = match.end()
    pieces.append(_double_quote_escape(text[position:]))
    return '"' + "".join(pieces) + '"'


def _double_quote_escape(text: str) -> str:
    return re.sub(r'([\\"$`])', r"\\\1", text)


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
