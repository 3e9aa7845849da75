"""``lookup``: dictionary value -> id, out-of-vocabulary for the rest."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from fbrapids.errors import OperatorError
from fbrapids.kernels import params as P
from fbrapids.kernels.builtins._shared import H_LOOKUP, ExprLike, builtin, call
from fbrapids.kernels.clit import c_number
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import DictionaryPath, Impl
from fbrapids.kernels.vocab import Vocabulary


def lookup(x: ExprLike, vocab: Mapping[Any, int | float] | Sequence[Any] | Vocabulary, oov: int | float = 0) -> Call:
    """Dictionary value -> id (int64); ``oov`` for values not in it.

    ``vocab`` is a dict ``{value: id}``, a sequence (ids 1, 2, ... in order) or a
    :class:`Vocabulary` (e.g. ``Vocabulary.from_counts(series.value_counts(), min_freq)``).
    A dict with float values (scores, prices, embeddings of one number) gives float64 and
    ``oov`` (a float) for the rest.  Keys match as Python compares them, in both forms:
    uint64 ids exactly (``2**64 - 1`` is not ``-1``; ``2**63 - 2`` is not ``2**63 - 1``,
    never through float64), a float column's value only a key equal to it (``2**53 + 1``
    matches no float64).  Null rule: a null input gives ``oov``.

    Example:
        >>> str(lookup("city", {"c1": 1, "c2": 2}))
        'lookup(city, vocab=Vocabulary(str, 2 keys), oov=0)'
        >>> str(lookup("city", {"c1": 0.25}, oov=0.0))
        "lookup_value(city, keys=('c1',), values=(0.25,), default=0.0)"
    """
    if isinstance(vocab, Mapping):
        ids: dict[Any, int] = {}
        for k, v in vocab.items():
            if isinstance(v, float):  # a float value anywhere: values, not ids
                return call("lookup_value", x, keys=tuple(vocab), values=tuple(float(v) for v in vocab.values()),
                            default=float(oov))
            ids[k] = v
        vocab = Vocabulary.from_mapping(ids)
    elif not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.from_values(vocab)
    return call("lookup", x, vocab=vocab, oov=oov)


def _resolve(t, p):
    vocab = p.get("vocab")
    if not isinstance(vocab, Vocabulary):
        raise OperatorError(f"lookup needs a fitted Vocabulary, got {type(vocab).__name__}")
    oov = int(p["oov"])
    x = t[0]
    oov_c = c_number(oov, "i64")
    if not len(vocab):  # an empty vocabulary: every row (of any column) is out of it
        return Impl("i64", "expr", oov_c, null_rule="handles", never_null=True)
    if (x == "str") != (vocab.kind == "str"):
        raise OperatorError(f"lookup: a {x} column against a vocabulary of {vocab.kind} keys")
    bufs = vocab.table(unsigned=x == "u64")
    if vocab.kind == "str":
        c = f"fbx_lookup_str({{a0}}, (const fbx_i64*){{b0}}, (const fbx_i64*){{b1}}, (const char*){{b2}}, (const fbx_i64*){{b3}}, {vocab.mask}LL, {oov_c})"
    else:
        c = f"fbx_lookup_int((fbx_i64){{a0}}, (const fbx_i64*){{b0}}, (const fbx_i64*){{b1}}, (const fbx_i64*){{b2}}, {vocab.mask}LL, {oov_c})"
    return Impl("i64", "expr", f"({{v0}} ? {c} : {oov_c})", null_rule="handles", never_null=True, buffers=bufs,
                footprint=int(sum(b.nbytes for b in bufs)))


OPERATOR = builtin("lookup", ("hashable",), "Dictionary value -> id (int64), `oov` for values not in it.", _resolve,
                   null_rule="a null input gives the out-of-vocabulary id", headers=(H_LOOKUP,), family="lookup",
                   dictionary=DictionaryPath(), params={"oov": P.integer()}, builder=lookup)
