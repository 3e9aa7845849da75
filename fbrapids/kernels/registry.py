"""The operator registry: name -> :class:`~fbrapids.kernels.operator.Operator`.

Filled from :data:`fbrapids.kernels.builtins.BUILTINS` when this module is first imported;
user operators are added by :func:`register_operator` (or :func:`add_operator`).  A new
built-in operator is one module of ``builtins/`` declaring its
:class:`~fbrapids.kernels.operator.Operator` (its C in ``csrc/ops/``): what the planner, the
dictionary path, the runtimes and the frame-level stage ask about it, and its function for
users; nothing else changes.

Example:
    >>> op = register_operator("times_plus_demo", "i64 x, i64 y", "i64 z", "z = x * y + 1;", replace=True)
    >>> get_operator("times_plus_demo") is op, "hash_bucket" in operators()
    (True, True)
"""

from __future__ import annotations

import threading

from fbrapids.errors import OperatorError
from fbrapids.kernels.builtins import BUILTINS
from fbrapids.kernels.operator import Operator, user_operator

_lock = threading.Lock()
_REGISTRY: dict[str, Operator] = {op.name: op for op in BUILTINS}
_generation = 0


def registry_generation() -> int:
    """A counter that moves whenever an operator is added or redefined: what is remembered
    about a plan (a compiled runtime) is valid only for the generation it was made in.

    Example:
        >>> g = registry_generation()
        >>> _ = register_operator("gen_demo", "i64 x", "i64 y", "y = x;", replace=True)
        >>> registry_generation() > g
        True
    """
    return _generation


def add_operator(op: Operator, replace: bool = False) -> Operator:
    """Put ``op`` in the registry (``replace`` to redefine a name)."""
    global _generation
    with _lock:
        if op.name in _REGISTRY and not replace and _REGISTRY[op.name] is not op:
            raise OperatorError(f"operator {op.name!r} is already registered (pass replace=True to redefine it)")
        if _REGISTRY.get(op.name) is not op:
            _REGISTRY[op.name] = op
            _generation += 1
    return op


def get_operator(name: str) -> Operator:
    """The registered operator ``name``; an unknown name lists the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OperatorError(f"unknown operator {name!r}; known operators: {', '.join(sorted(_REGISTRY))}") from None


def find_operator(name: str) -> Operator | None:
    """The registered operator ``name``, or None (what a caller asking about an
    expression's operator uses: ``find_operator(call.op)``).

    Example:
        >>> find_operator("hour").reads_time, find_operator("no_such_operator") is None
        (True, True)
    """
    return _REGISTRY.get(name)


def operators() -> dict[str, Operator]:
    """All registered operators by name."""
    with _lock:
        return dict(_REGISTRY)


def register_operator(name: str, in_params: str, out_params: str, operation: str, *,
                      preamble: str = "", null_rule: str = "propagate", doc: str = "",
                      replace: bool = False) -> Operator:
    """Register a user operator from a C snippet, like ``cupy.ElementwiseKernel``.

    The arguments are those of :func:`fbrapids.kernels.operator.user_operator`; ``replace``
    redefines an existing name.

    Example:
        >>> register_operator("halve_demo", "f64 x", "f64 y", "y = x / 2;", replace=True).inputs
        ('f64',)
    """
    op = user_operator(name, in_params, out_params, operation, preamble=preamble, null_rule=null_rule, doc=doc)
    return add_operator(op, replace=replace)
