"""Canonical JSON (RFC 8785 style) and byte caps that never split a UTF-8 character.

The model-context chapter measures a record as its `content` serialised this way, in UTF-8:
object members sorted by key (UTF-16 code units), no insignificant whitespace, strings written
as their characters (only `"`, `\\` and characters below U+0020 escaped), numbers as ECMAScript
writes them.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if not math.isfinite(value):
        raise ValueError("not a JSON number")
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # position of the decimal point relative to the digits (ECMAScript's n)
    point = len(whole) + int(exponent or 0) if whole != "0" else int(exponent or 0) - (len(fraction) - len(fraction.lstrip("0")))
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= point <= 21:
        text = digits + "0" * (point - k)
    elif 0 < point <= 21:
        text = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        text = "0." + "0" * (-point) + digits
    else:
        exp = point - 1
        text = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if exp >= 0 else "-") + str(abs(exp))
    return sign + text


def canonical(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else _number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(canonical(item) for item in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: item[0].encode("utf-16-be"))
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(v) for k, v in items) + "}"
    raise TypeError(f"not JSON: {type(value).__name__}")


def canonical_bytes(value: Any) -> bytes:
    return canonical(value).encode("utf-8")


def utf8_prefix(data: bytes, limit: int) -> bytes:
    """The longest prefix of `data` of at most `limit` bytes that ends on a character boundary."""
    if len(data) <= limit:
        return data
    end = limit
    while end > 0 and (data[end] & 0xC0) == 0x80:  # data[end] continues the character before it
        end -= 1
    return data[:end]
