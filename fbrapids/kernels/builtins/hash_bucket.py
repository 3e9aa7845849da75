"""``hash_bucket``: TensorFlow to_hash_bucket_fast."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import BUCKETS, H_HASH, ExprLike, builtin, checked, hash_impl
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import DictionaryPath


def hash_bucket(x: ExprLike, buckets: int) -> Call:
    """``fingerprint64(str(x)) mod buckets`` (int64), TensorFlow ``to_hash_bucket_fast``;
    element-wise on lists (texts as :func:`hash`; ``1 <= buckets < 2**63``). Null rule:
    null in, null out; a list with null elements is an error naming the column.

    Example:
        >>> str(hash_bucket("user_id", 1 << 20))
        'hash_bucket(user_id, buckets=1048576)'
    """
    return checked(OPERATOR, x, buckets=buckets)


def _resolve(t, p):
    return hash_impl(t[0], int(p["buckets"]))


OPERATOR = builtin("hash_bucket", ("crossable",), "TensorFlow to_hash_bucket_fast: fingerprint64(str(x)) mod "
                   "buckets (int64); element-wise on lists.", _resolve, headers=(H_HASH,), family="hash",
                   hashes=True, dictionary=DictionaryPath(device=True), params={"buckets": BUCKETS},
                   builder=hash_bucket)
