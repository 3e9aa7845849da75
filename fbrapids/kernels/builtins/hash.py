"""``hash``: FarmHash Fingerprint64 of a value, or of each element of a list."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import H_HASH, ExprLike, builtin, call, hash_impl
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import DictionaryPath


def hash(x: ExprLike) -> Call:  # noqa: A001 - the operator's name
    """FarmHash Fingerprint64 (uint64) of a string's UTF-8 bytes (NUL bytes included) or of an
    integer's decimal text (the exact value at any width: uint64 ``2**64 - 1`` hashes
    ``"18446744073709551615"``; a bool hashes as ``"1"`` / ``"0"``); of each element for a
    list. Null rule: null in, null out; a list with null elements is an error naming the column.

    Example:
        >>> str(hash("q"))
        'hash(q)'
    """
    return call("hash", x)


def _resolve(t, p):
    return hash_impl(t[0], 0)


OPERATOR = builtin("hash", ("crossable",), "FarmHash Fingerprint64 (uint64) of a string, of an integer's decimal "
                   "text, or of each element of a list.", _resolve, headers=(H_HASH,), family="hash", hashes=True,
                   dictionary=DictionaryPath(device=True), builder=hash)
