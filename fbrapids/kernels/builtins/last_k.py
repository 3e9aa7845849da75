"""``last_k``: the last k elements of a list."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import COUNT, H_LIST, ExprLike, builtin, checked, k_elements, list_end
from fbrapids.kernels.expr import Call


def last_k(x: ExprLike, k: int) -> Call:
    """The last ``k`` elements of a list (recent behaviour; ``k=0`` gives []). Element types
    as :func:`first_k`. Null rule: null in, null out; null elements: an error naming the column.

    Example:
        >>> str(last_k("clicks", 5))
        'last_k(clicks, k=5)'
    """
    return checked(OPERATOR, x, k=k)


OPERATOR = builtin("last_k", ("list",), "The last k elements of a list (behaviour sequences).", list_end(1),
                   headers=(H_LIST,), family="list", params={"k": COUNT}, longest=k_elements, builder=last_k)
