"""A toy operator added in this one file (its C beside it, ``fbx_ops_toy.h``): ``toy_mod(x, m)``,
``x mod m`` with Python's sign rule (0 .. m - 1) for an int64 column.

Everything the planner, the dictionary path, the CUDA runtime, the disk budget and the plan
drawing ask about it is declared here, on its :class:`~fbrapids.kernels.Operator`; nothing in
the package names it (``tests/project/test_toy_operator.py`` checks both).

Example:
    >>> import pandas as pd, fbrapids
    >>> pd.DataFrame({"x": [-3, 10]}).fbx.extract(t=toy_mod("x", 4))["t"].tolist()
    [1, 2]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fbrapids.kernels import Call, DictionaryPath, Expr, Impl, Operator, add_operator
from fbrapids.kernels.operator import Bound, Sizes
from fbrapids.kernels.params import integer
from fbrapids.ops import call

HEADER = str(Path(__file__).with_name("fbx_ops_toy.h"))


def _resolve(in_types: tuple[str, ...], params: dict[str, Any]) -> Impl:
    m = int(params["m"])  # checked by the declared check
    return Impl("i64", "expr", f"fbx_toy_mod((fbx_i64){{a0}}, {m}LL)")


def _residues(c: Call, sizes: Sizes) -> Bound | None:
    m = c.param_dict().get("m")
    return (m, f"{m:,} residues") if isinstance(m, int) and m > 0 else None


TOY = add_operator(Operator(
    name="toy_mod", inputs=("i64",), resolver=_resolve, doc="x mod m, 0 .. m - 1 (Python's %) (int64).",
    headers=(HEADER,), family="scalar", params={"m": integer(lo=1)}, dictionary=DictionaryPath(),
    bound=_residues), replace=True)


def toy_mod(x: Expr | str, m: int) -> Call:
    """``x mod m`` (0 .. m - 1) of an int64 column; ``m`` checked when the expression is built.

    Example:
        >>> toy_mod("x", 0)
        Traceback (most recent call last):
        ...
        fbrapids.errors.OperatorError: toy_mod: parameter 'm' must be an integer in [1, 9223372036854775807], got 0
    """
    TOY.check_params({"m": m})
    return call("toy_mod", x, m=m)
