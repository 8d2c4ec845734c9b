"""Token-id arrays cut out of a trace line and parsed by numpy, without a Python int per id.

A 100K-token `append` parsed by orjson is 100K Python ints, then numpy copies them into an array
and the reader scans them again for booleans: ~7 ms a line, most of reading a long-prompt trace.
`cut_ids` takes the array's bytes out of the line before orjson sees it and parses them with
`np.fromstring` (~2 ms). It only takes arrays it can parse exactly as JSON would: plain decimal
ids separated by bare commas, as the trace writer (and orjson, json.dumps with compact
separators) writes them. Anything else (spaces, signs, leading zeros, an empty array, a key that
occurs twice in the line) is left in the line, so orjson and the usual checks see it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PLACEHOLDER", "cut_ids"]

# Stands in the line for the cut array; the caller checks that the key holds it after parsing.
PLACEHOLDER = "\x00ids"
_PLACEHOLDER_JSON = b'"\\u0000ids"'
_DIGITS = b"0123456789"
_INT64_MAX = np.iinfo(np.int64).max


def cut_ids(raw: bytes, key: str) -> tuple[bytes, np.ndarray] | None:
    """(the line with `key`'s array replaced by PLACEHOLDER, the ids as int64), or None when the
    array is not in the plain form (then the line is to be parsed as it is)."""
    tag = f'"{key}":['.encode()
    start = raw.find(tag)
    if start < 0:
        return None
    lo = start + len(tag)
    hi = raw.find(b"]", lo)
    body = raw[lo:hi]
    # the key once in the line (after the array: none can be in it, nor before the first)
    if hi < 0 or not body or body.translate(None, _DIGITS + b",") or raw.find(tag, hi) >= 0:
        return None
    # no empty element (",,", or a comma first or last) and no leading zero ("07" is not JSON)
    if body[:1] == b"," or body[-1:] == b"," or b",," in body or _leading_zero(body):
        return None
    ids = np.fromstring(body, dtype=np.int64, sep=",")  # type: ignore[call-overload]
    # an id past int64 saturates to its maximum: the usual path gives its error
    if len(ids) != body.count(b",") + 1 or int(ids.max()) == _INT64_MAX:
        return None
    return raw[: lo - 1] + _PLACEHOLDER_JSON + raw[hi + 1 :], ids


def _leading_zero(body: bytes) -> bool:
    """Whether an id starts with 0 and has more digits (only id 0 itself starts with 0, so the
    search rarely stops)."""
    if body[:1] == b"0" and body[1:2] not in (b",", b""):
        return True
    i = body.find(b",0")
    while i >= 0:
        if body[i + 2 : i + 3] not in (b",", b""):
            return True
        i = body.find(b",0", i + 2)
    return False
