"""``split``: a string's tokens on a separator, or their hash buckets."""

from __future__ import annotations

from fbrapids.kernels import params as P
from fbrapids.kernels.builtins._shared import (
    BUCKETS_OR_RAW,
    H_HASH,
    H_STRING,
    ExprLike,
    builtin,
    c_separator,
    checked,
)
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import DictionaryPath, Impl


def split(x: ExprLike, sep: str = " ", buckets: int | None = None) -> Call:
    """Split a string on every occurrence of ``sep`` (a non-empty string: any bytes, NUL and
    multi-byte characters included), empty pieces removed.

    ``buckets=None``: list<str>; ``buckets > 0``: the tokens' hash buckets (list<int64>);
    ``buckets=0``: their raw fingerprints (list<uint64>).  Null rule: null in, null out.

    Example:
        >>> str(split("query", " ", buckets=1 << 18))
        "split(query, sep=' ', buckets=262144)"
    """
    return checked(OPERATOR, x, sep=sep, buckets=buckets)


def _resolve(t, p):
    sep, seplen = c_separator(p)
    b = p.get("buckets")
    if b is None:
        return Impl("list<str>", "var", f"fbx_split_str({{a0}}, {sep}, {seplen}, {{ends}}, {{bytes}}, {{nbytes}})")
    b = int(b)
    return Impl("list<i64>" if b else "list<u64>", "var", f"fbx_split_hash({{a0}}, {sep}, {seplen}, {b}LL, {{out}})")


OPERATOR = builtin("split", ("str",), "Split on every occurrence of `sep`, empty pieces removed: list<str>; or with "
                   "`buckets` their hash buckets (list<int64>), buckets=0 their raw fingerprints (list<uint64>).",
                   _resolve, headers=(H_HASH, H_STRING), family="string", hashes=True,
                   dictionary=DictionaryPath(kind="tokens", takes=("str",)),
                   params={"sep": P.separator, "buckets": BUCKETS_OR_RAW}, builder=split)
