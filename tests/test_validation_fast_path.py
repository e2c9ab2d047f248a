"""The fast request checks accept and refuse exactly what the plain ones did.

Bodies are validated by a compiled validator and checked for lone surrogates and depth at C
speed (issue: validation cost more than the work it guarded). The slow versions stay here as
oracles, and Hypothesis looks for any body on which the two disagree.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import spec
from reference_impl.errors import DomainError
from reference_impl.http.requests import MAX_NESTING, _check_text_and_depth, _compiled_validator

REQUEST_SCHEMAS = {
    "session-create.json": {"session_id": "s-1", "name": "n", "description": None},
    "turn-create.json": {"role": "user", "turn_id": "t-1"},
    "turn-finish.json": {"status": "completed"},
    "records-append.json": {"records": [{"type": "message", "content": {"text": "hi", "n": [1, 2.5, None, True]}}]},
    "fork-request.json": {"cut": {"mode": "through", "turn_id": "t-1"}, "target_session_id": "c-1", "header": {"name": None}},
    "lease-request.json": {"ttl_seconds": 30, "lease_id": "l-1"},
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["user", "assistant", "completed", "failed", "latest", "through", "before", "s-1", "", "a" * 129]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["records", "type", "content", "cut", "mode", "turn_id", "name", "x"]) | st.text(max_size=5), children, max_size=3),
    max_leaves=12,
)


def _mutate(data: st.DataObject, value: Any, depth: int = 0) -> Any:
    """Replace, drop or add parts of a valid body, keeping most of it valid-looking."""
    choice = data.draw(st.integers(0, 5))
    if choice == 0 or depth > 4:
        return data.draw(json_values)
    if isinstance(value, dict) and value:
        key = data.draw(st.sampled_from(sorted(value)))
        mutated = dict(value)
        action = data.draw(st.integers(0, 3))
        if action == 0:
            del mutated[key]
        elif action == 1:
            mutated[data.draw(st.text(max_size=6))] = data.draw(json_values)
        else:
            mutated[key] = _mutate(data, value[key], depth + 1)
        return mutated
    if isinstance(value, list) and value:
        index = data.draw(st.integers(0, len(value) - 1))
        return [*value[:index], _mutate(data, value[index], depth + 1), *value[index + 1 :]]
    return value if choice < 3 else data.draw(json_values)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


@pytest.mark.parametrize("schema_file", sorted(REQUEST_SCHEMAS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_validator_agrees_with_the_reference_validator(schema_file: str, data: st.DataObject) -> None:
    body = _mutate(data, REQUEST_SCHEMAS[schema_file])
    # Known and intended difference: JSON Schema patterns are ECMA-262, where `$` ends the input;
    # Python's `re` lets `$` match before a final newline. The compiled validator is the correct one.
    assume(not any(text.endswith("\n") for text in _strings(body)))
    slow = not list(spec.validator(schema_file).iter_errors(body))
    fast = _compiled_validator(schema_file).is_valid(body)
    assert fast == slow, f"{schema_file}: compiled says {fast}, jsonschema says {slow} for {json.dumps(body)[:300]}"


def test_trailing_newline_in_an_id_is_refused() -> None:
    assert not _compiled_validator("session-create.json").is_valid({"session_id": "abc\n"})


# ---------------------------------------------------------------- surrogates and depth
def _walk_oracle(value: Any) -> str | None:
    """The former check, node by node in Python: 'surrogate', 'depth' or None (surrogates first)."""
    surrogate = depth_exceeded = False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            surrogate |= any("\ud800" <= char <= "\udfff" for char in item)
        elif isinstance(item, (dict, list)):
            depth_exceeded |= depth > MAX_NESTING
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return "surrogate" if surrogate else "depth" if depth_exceeded else None


def _fast(value: Any, text: str) -> str | None:
    try:
        _check_text_and_depth(value, text)
    except DomainError as exc:
        return {"malformed-json": "surrogate", "invalid-request": "depth"}[exc.kind]
    return None


escaped_strings = st.lists(
    st.sampled_from(["a", "\\\\", "\\\"", "\\n", "\\u0041", "\\ud83d\\ude00", "\\ud800", "\\udc00", "\\\\ud800", "é", "[", "{"]),
    max_size=6,
).map(lambda parts: '"' + "".join(parts) + '"')


@st.composite
def nested_texts(draw: st.DrawFn) -> str:
    depth = draw(st.sampled_from([1, 5, MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1, 300]))
    opener = draw(st.sampled_from(["[", '{"k":']))
    closer = "]" if opener == "[" else "}"
    leaf = draw(escaped_strings)
    siblings = ",".join(draw(st.lists(escaped_strings, max_size=3)))
    inner = f"[{leaf}{',' + siblings if siblings else ''}]"
    return opener * (depth - 1) + inner + closer * (depth - 1)


@settings(max_examples=400, deadline=None)
@given(text=nested_texts())
def test_fast_surrogate_and_depth_checks_agree_with_the_walk(text: str) -> None:
    value = json.loads(text)
    assert _fast(value, text) == _walk_oracle(value), text[:200]


@pytest.mark.parametrize(
    ("text", "lone"),
    [
        ('"\\ud83d\\ude00"', False),
        ('"\\ud800"', True),
        ('"\\udc00"', True),
        ('"\\ud800x\\udc00"', True),
        ('"\\\\ud800"', False),  # an escaped backslash, then plain text
        ('"\\\\\\ud800"', True),
        ('"\\u0041\\n"', False),
    ],
)
def test_lone_surrogate_escapes_are_found_in_text_too_deep_to_parse(text: str, lone: bool) -> None:
    from reference_impl.http.requests import _has_lone_surrogate_escape

    assert _has_lone_surrogate_escape("[" * 2000 + text + "]" * 2000) is lone
