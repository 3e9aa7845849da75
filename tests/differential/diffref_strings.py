"""Independent references for the hashing, string and list operators of ``fbrapids.ops``.

Written from the operators' docstrings in plain Python and pyfarmhash; nothing here
imports fbrapids.  Each reference takes one row's Python values (``None`` for null) and
returns that row's expected value (``None`` for null).

* Hashing is FarmHash Fingerprint64 (``farmhash.fingerprint64``) of a string's UTF-8
  bytes, of an integer's decimal text (a bool is the integer 1 / 0), element-wise on lists;
  a bucket is ``fingerprint % buckets`` (TensorFlow ``to_hash_bucket_fast``).
* Null rule: null in, null out (``pad`` excepted: a null list becomes padding).
* Null list elements are refused by the kernel operators (an error naming the column);
  ``pad`` keeps them where they are, ``overlap_count`` never matches them.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import farmhash


def _text(v: Any) -> str:
    """The text a value hashes as: a string itself, an integer (or bool) its decimal text."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    raise TypeError(f"not hashable as text: {v!r}")


def fingerprint(v: Any) -> int:
    """FarmHash Fingerprint64 of ``v``'s text (UTF-8)."""
    return farmhash.fingerprint64(_text(v).encode("utf-8", "surrogatepass"))


def _bucket(fp: int, buckets: int | None) -> int:
    return fp if not buckets else fp % buckets


def hash(v: Any) -> Any:  # noqa: A001 - the operator's name
    """Fingerprint of a string / integer; of each element of a list; null in, null out."""
    if v is None:
        return None
    if isinstance(v, list):
        return [fingerprint(x) for x in v]
    return fingerprint(v)


def hash_bucket(v: Any, buckets: int) -> Any:
    """``fingerprint(str(v)) % buckets``, element-wise on lists."""
    if v is None:
        return None
    if isinstance(v, list):
        return [fingerprint(x) % buckets for x in v]
    return fingerprint(v) % buckets


def cross(values: Sequence[Any], buckets: int | None = 1 << 20, cap: int | None = None, sep: str = "_") -> Any:
    """Hash of ``str(x1) + sep + ... + str(xk)``; with list inputs the cartesian product,
    first input outermost, at most ``cap`` combinations (a list); scalars are lists of one.
    A null input gives null; an empty list gives []."""
    if any(v is None for v in values):
        return None
    any_list = any(isinstance(v, list) for v in values)
    pools = [v if isinstance(v, list) else [v] for v in values]
    keys = (sep.join(_text(x) for x in combo) for combo in itertools.product(*pools))
    if cap is not None and cap > 0:
        keys = itertools.islice(keys, cap)
    out = [_bucket(farmhash.fingerprint64(k.encode("utf-8", "surrogatepass")), buckets) for k in keys]
    if any_list:
        return out
    return out[0]


def split(v: Any, sep: str = " ", buckets: int | None = None) -> Any:
    """The non-empty pieces of ``v.split(sep)``; their buckets (``buckets > 0``) or raw
    fingerprints (``buckets=0``)."""
    if v is None:
        return None
    pieces = [p for p in v.split(sep) if p]
    if buckets is None:
        return pieces
    return [_bucket(fingerprint(p), buckets) for p in pieces]


def length(v: Any) -> Any:
    """UTF-8 bytes of a string; elements of a list."""
    if v is None:
        return None
    if isinstance(v, list):
        return len(v)
    return len(v.encode("utf-8", "surrogatepass"))


def lower(v: Any) -> Any:
    """ASCII A-Z lowered; every other character as it is."""
    if v is None:
        return None
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in v)


def substring(v: Any, start: int, length: int | None = None) -> Any:
    """Code points ``[start, start + length)``; a negative start counts from the end
    (clamped at 0); ``length=None`` to the end."""
    if v is None:
        return None
    if start < 0:
        start = max(0, len(v) + start)
    return v[start:] if length is None else v[start:start + length]


def ngrams(tokens: Any, n: int, sep: str = " ", buckets: int | None = None) -> Any:
    """The ``n`` consecutive tokens joined by ``sep``; their buckets (``buckets > 0``) or
    raw fingerprints (``buckets=0``)."""
    if tokens is None:
        return None
    grams = [sep.join(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if buckets is None:
        return grams
    return [_bucket(fingerprint(g), buckets) for g in grams]


def first_k(v: Any, k: int) -> Any:
    return None if v is None else v[:k]


def last_k(v: Any, k: int) -> Any:
    return None if v is None else (v[len(v) - k:] if k < len(v) else list(v))


def pad(v: Any, n: int, value: Any = 0, side: str = "right") -> list[Any]:
    """Exactly ``n`` elements: right keeps the first ``n`` and pads after, left keeps the
    last ``n`` and pads before; a null list is all padding."""
    v = [] if v is None else v
    if side == "right":
        kept = v[:n]
        return kept + [value] * (n - len(kept))
    kept = v[len(v) - n:] if n < len(v) else list(v)
    return [value] * (n - len(kept)) + kept


def overlap_count(a: Any, b: Any) -> Any:
    """How many elements of ``a`` (duplicates each counted) appear in ``b``; null elements
    never match; null if either list is null."""
    if a is None or b is None:
        return None
    present = {(type(x) is str, x) for x in b if x is not None}
    return sum(1 for x in a if x is not None and (type(x) is str, x) in present)


OPERATORS: dict[str, Callable[..., Any]] = {
    "hash": hash, "hash_bucket": hash_bucket, "cross": cross, "split": split, "length": length,
    "lower": lower, "substring": substring, "ngrams": ngrams, "first_k": first_k, "last_k": last_k,
    "pad": pad, "overlap_count": overlap_count,
}
