"""``cross``: the hashed cross of N inputs (cartesian over list inputs)."""

from __future__ import annotations

from fbrapids.errors import OperatorError
from fbrapids.kernels import params as P, types as T
from fbrapids.kernels.builtins._shared import (
    BUCKETS_OR_RAW,
    H_CROSS,
    H_HASH,
    ExprLike,
    builtin,
    c_separator,
    checked,
)
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import DictionaryPath, Impl

_XIN = {"str": "fbx_x_str", "list<i64>": "fbx_x_li64", "list<u64>": "fbx_x_lu64", "list<str>": "fbx_x_lstr"}


def cross(*xs: ExprLike, buckets: int | None = 1 << 20, cap: int | None = None, sep: str = "_") -> Call:
    """Hashed feature cross: ``hb(str(x1) + sep + ... + sep + str(xk), buckets)``.

    With list inputs, the cartesian product with the first input outermost, keeping the
    first ``cap`` combinations (``None`` or 0: all) (a list<int64> result); scalars join as
    lists of one.  ``sep`` is a non-empty string.
    ``buckets=None`` (or 0) gives raw fingerprints (uint64).  Keys of any length hash (a
    key past 4,096 bytes is hashed piece by piece: the same fingerprint).  Null rule: a
    null input gives null; an empty list gives [].

    Example:
        >>> str(cross("category", "city", buckets=1 << 20))
        "cross(category, city, buckets=1048576, cap=None, sep='_')"
    """
    if len(xs) < 2:
        raise OperatorError(f"cross needs at least 2 inputs, got {len(xs)}")
    return checked(OPERATOR, *xs, buckets=buckets, cap=cap, sep=sep)


def _resolve(t, p):
    if len(t) > 16:
        raise OperatorError(f"cross takes at most 16 inputs, got {len(t)}")
    buckets = int(p.get("buckets") or 0)
    cap = int(p.get("cap") or 0)
    sep, seplen = c_separator(p)
    lines = [f"fbx_xin xs_{{id}}[{len(t)}];"]
    for i, x in enumerate(t):
        if x in _XIN:
            lines.append(f"xs_{{id}}[{i}] = {_XIN[x]}({{a{i}}});")
        elif T.is_signed(x):
            lines.append(f"xs_{{id}}[{i}] = fbx_x_i64((fbx_i64){{a{i}}});")
        else:
            lines.append(f"xs_{{id}}[{i}] = fbx_x_u64((fbx_u64){{a{i}}});")
    c = f"fbx_cross(xs_{{id}}, {len(t)}, {sep}, {seplen}, {buckets}LL, {{cap}}LL, {{err}}, {{out}})"
    if any(x in T.LIST_TYPES for x in t):
        return Impl("list<i64>" if buckets else "list<u64>", "var", c.replace("{cap}", str(cap)),
                    prelude=" ".join(lines))
    return Impl("i64" if buckets else "u64", "func", f"({c.replace('{cap}', '1')}, 1)", prelude=" ".join(lines))


OPERATOR = builtin("cross", ("crossable",), "Hashed cross of N inputs: hb(str(x1) + sep + ... + str(xk)); with a "
                   "list input, the cartesian product (first input outermost), at most `cap` pairs.", _resolve,
                   variadic=True, headers=(H_HASH, H_CROSS),
                   null_rule="a null input gives a null output; an empty list gives []", family="cross", hashes=True,
                   dictionary=DictionaryPath(), params={"buckets": BUCKETS_OR_RAW, "cap": BUCKETS_OR_RAW,
                                                        "sep": P.separator}, builder=cross)
