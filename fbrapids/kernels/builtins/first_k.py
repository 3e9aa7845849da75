"""``first_k``: the first k elements of a list."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import COUNT, H_LIST, ExprLike, builtin, checked, k_elements, list_end
from fbrapids.kernels.expr import Call


def first_k(x: ExprLike, k: int) -> Call:
    """The first ``k`` elements of a list (the whole list when shorter). Integer lists come
    back as list<int64>, or list<uint64> for unsigned elements (values exact). Null rule: null
    in, null out; a list with null elements is an error naming the column.

    Example:
        >>> str(first_k("clicks", 5))
        'first_k(clicks, k=5)'
    """
    return checked(OPERATOR, x, k=k)


OPERATOR = builtin("first_k", ("list",), "The first k elements of a list (behaviour sequences).", list_end(0),
                   headers=(H_LIST,), family="list", params={"k": COUNT}, longest=k_elements, builder=first_k)
