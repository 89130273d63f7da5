"""JSON values compared as users mean them: one hashable normal form per value (tool arguments, state records).

Strings NFKC-normalized, stripped and case-folded; numbers by exact value (3.0 == 3, never rounded); lists as
multisets; objects by key. Used by the tool_call and workplace verifiers and the shared tool checks.
"""

from __future__ import annotations

import json
import math
import unicodedata
from typing import Any


def _number(value: int | float) -> tuple[str, Any]:
    """A number's exact value: an integral float as the int it equals (so 3.0 is 3, whose repr is the same), any
    other float as itself. Never converts an int to a float: 10**400 would overflow, 2**53 + 1 would round."""
    if isinstance(value, float):
        if not math.isfinite(value):  # not JSON; named so that the order below stays total
            return ("x", repr(value))
        if value.is_integer():
            return ("n", int(value))
    return ("n", value)


def normalize(value: Any) -> Any:
    """A hashable form of a JSON value (see the module contract) whose equality is the match and whose ``repr``
    is canonical. Normal forms are totally ordered (a tag, then a payload of one type per tag; Python compares an
    int with a float exactly), so lists are multisets by plain sorting. Never raises on a JSON value."""
    if isinstance(value, str):
        return ("s", unicodedata.normalize("NFKC", value).strip().casefold())
    if isinstance(value, bool) or value is None:
        return ("c", json.dumps(value))
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, list):
        return ("l", tuple(sorted(normalize(v) for v in value)))
    if isinstance(value, dict):
        return ("d", tuple(sorted((k, normalize(v)) for k, v in value.items())))
    raise TypeError(f"not a JSON value: {type(value).__name__}")
