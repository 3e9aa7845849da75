"""The built-in operators, one module each: :data:`BUILTINS`.  Importing this package
registers nothing; :mod:`fbrapids.kernels.registry` fills the registry from :data:`BUILTINS`.

Each module of this package (``clip.py``, ``cross.py``, ...: its name is the operator's)
declares one :class:`~fbrapids.kernels.operator.Operator` as ``OPERATOR`` and, for a user's
call, its function (``fbrapids.ops.<name>``, the operator's ``builder``).  Its resolver gives
the C (see :mod:`fbrapids.kernels.operator` for the template placeholders), and it declares
what the rest asks about it (parameter checks, stage, family, dictionary path, hashing, time
input, distinct-value bounds): the planner, runtimes and budgets ask it, never its name.  Its
C lives in ``csrc/ops/*.h``; what several operators share is in ``_shared.py``.  A new
built-in is one new module here: the package finds its modules itself, in sorted order.

Example:
    >>> sorted(op.name for op in BUILTINS if op.needs_fit)[:3]
    ['categorify', 'count_encode', 'fill_null_fitted']
    >>> [op.name for op in BUILTINS] == sorted(op.name for op in BUILTINS)
    True
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Iterable

from fbrapids.errors import OperatorError
from fbrapids.kernels.builtins._shared import JSON_SCAN_PATHS, ExprLike, call
from fbrapids.kernels.operator import Operator

__all__ = ["BUILTINS", "JSON_SCAN_PATHS", "ExprLike", "call", "operator_modules", "declared_operators"]


def operator_modules(path: Iterable[str] = __path__) -> list[str]:
    """The operator modules' names in the folders ``path`` (this package's), sorted: every
    module but the private ones (``_shared``).

    Example:
        >>> operator_modules()[:3]
        ['bucketize', 'cast', 'categorify']
    """
    return sorted(m.name for m in pkgutil.iter_modules(list(path)) if not m.name.startswith("_"))


def declared_operators(names: Iterable[str]) -> list[Operator]:
    """The ``OPERATOR`` each named module of this package declares, in that order; a module
    without one (or whose operator has another name) is an OperatorError naming it."""
    found = []
    for name in names:
        module = importlib.import_module(f"{__name__}.{name}")
        op = getattr(module, "OPERATOR", None)
        if not isinstance(op, Operator) or op.name != name:
            raise OperatorError(f"{module.__file__}: an operator module declares OPERATOR, an Operator named {name!r} "
                                f"after the module, got {op!r}")
        found.append(op)
    return found


#: every built-in operator, in the sorted order of their modules
BUILTINS: list[Operator] = declared_operators(operator_modules())
