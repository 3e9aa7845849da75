"""C literals for operator parameters (strings as escaped byte literals, numbers exact).

Example:
    >>> print(c_string('a"b?é'))
    "a\\042b\\077\\303\\251"
    >>> c_number(0.1, "f64")
    '0x1.999999999999ap-4'
"""

from __future__ import annotations

import math


def c_string(s: str | bytes) -> str:
    """A C string literal of the UTF-8 bytes of ``s`` (every byte outside [ -~] escaped)."""
    b = s.encode("utf-8") if isinstance(s, str) else s
    out = []
    for ch in b:
        if 32 <= ch < 127 and ch not in (34, 39, 63, 92):  # ", ', ?, backslash
            out.append(chr(ch))
        else:
            out.append("\\%03o" % ch)
    return '"' + "".join(out) + '"'


def c_number(v: float | int, type_name: str) -> str:
    """An exact C literal of ``v`` for a column type (floats as hex literals)."""
    if type_name in ("f32", "f64"):
        v = float(v)
        if math.isnan(v):
            return "(0.0/0.0)"
        if math.isinf(v):
            return "(1.0/0.0)" if v > 0 else "(-1.0/0.0)"
        return v.hex()
    v = int(v)
    if type_name.startswith("u") or v > 2**63 - 1:
        return f"{v}ULL"
    if v == -(2**63):
        return "(-9223372036854775807LL - 1)"
    return f"{v}LL"
