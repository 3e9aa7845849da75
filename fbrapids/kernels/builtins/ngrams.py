"""``ngrams``: the n-grams of a token list, or their hash buckets."""

from __future__ import annotations

from fbrapids.kernels import params as P
from fbrapids.kernels.builtins._shared import BUCKETS_OR_RAW, H_HASH, H_LIST, ExprLike, builtin, c_separator, checked
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import DictionaryPath, Impl


def ngrams(tokens: ExprLike, n: int, sep: str = " ", buckets: int | None = None) -> Call:
    """The ``n``-grams of a token list joined by ``sep`` (list<str>), or with ``buckets > 0``
    their hash buckets (list<int64>), ``buckets=0`` their raw fingerprints (list<uint64>).
    N-grams of any length hash. Null rule: null in, null out.

    Example:
        >>> from fbrapids.ops import split
        >>> str(ngrams(split("q"), 2, buckets=1 << 20))
        "ngrams(split(q, sep=' ', buckets=None), n=2, sep=' ', buckets=1048576)"
    """
    return checked(OPERATOR, tokens, n=n, sep=sep, buckets=buckets)


def _resolve(t, p):
    n = int(p["n"])
    sep, seplen = c_separator(p)
    b = p.get("buckets")
    if b is None:
        return Impl("list<str>", "var", f"fbx_ngrams_str({{a0}}, {n}LL, {sep}, {seplen}, {{ends}}, {{bytes}}, {{nbytes}})")
    b = int(b)
    return Impl("list<i64>" if b else "list<u64>", "var",
                f"fbx_ngrams_hash({{a0}}, {n}LL, {sep}, {seplen}, {b}LL, {{err}}, {{out}})")


OPERATOR = builtin("ngrams", ("list<str>",), "The n-grams of a token list joined by `sep` (list<str>), or with "
                   "`buckets` their hash buckets.", _resolve, headers=(H_HASH, H_LIST), family="list", hashes=True,
                   dictionary=DictionaryPath(kind="tokens", takes=("list<str>",), coded_inputs_only=True),
                   params={"n": P.integer(lo=1), "sep": P.separator, "buckets": BUCKETS_OR_RAW}, builder=ngrams)
