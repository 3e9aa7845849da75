"""Feature operators: constructors of feature expressions for ``df.fbx.extract``.

Each returns an expression; arguments are column names or other expressions.  Extraction
runs them as compiled meta-kernels, one per layer of the expression DAG (see
``df.fbx.explain``).  Hashing is FarmHash Fingerprint64 (TensorFlow
``to_hash_bucket_fast``); integers hash as their decimal text.

Each operator's function (``ops.split``, ``ops.cross``, ...) is declared beside the operator,
in its module of :mod:`fbrapids.kernels.builtins` (the operator's ``builder``), and found here
through the built-ins: a new built-in needs no line in this module.

Example:
    >>> import pandas as pd, fbrapids
    >>> from fbrapids import ops
    >>> df = pd.DataFrame({"q": ["red shoes", None], "ts": [1700000000, 1700003600]})
    >>> out = df.fbx.extract(tok=ops.split(ops.fill_null("q", ""), " ", buckets=100), h=ops.hour("ts"))
    >>> out["tok"].tolist(), out["h"].tolist()
    ([[10, 9], []], [22, 23])
"""

from __future__ import annotations

from typing import Callable

from fbrapids.kernels import (
    Call,
    Col,
    Vocabulary,  # noqa: F401  (re-exported)
    register_operator,  # noqa: F401  (re-exported)
)
from fbrapids.kernels.builtins import BUILTINS, ExprLike, call  # noqa: F401  (ExprLike re-exported: what an operator takes)

#: each built-in's function for users, by operator name (``fbrapids.ops.<name>``)
_BUILDERS: dict[str, Callable[..., Call]] = {op.name: op.builder for op in BUILTINS if op.builder is not None}

__all__ = ["col", "call", *_BUILDERS, "register_operator", "Vocabulary"]


def col(name: str) -> Col:
    """The input column ``name``.

    Example:
        >>> col("ts")
        Col(name='ts')
    """
    return Col(name)


def constructors() -> dict[str, Callable[..., Call | Col]]:
    """The functions that build feature expressions, by name: :func:`col`, :func:`call` and
    each built-in operator's (never :func:`register_operator`, which registers C).

    Example:
        >>> sorted(constructors())[:4]
        ['bucketize', 'call', 'cast', 'categorify']
    """
    return {"col": col, "call": call, **_BUILDERS}


def __getattr__(name: str) -> Callable[..., Call]:
    """``fbrapids.ops.<name>``: the built-in operator ``name``'s function."""
    try:
        return _BUILDERS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *_BUILDERS})
