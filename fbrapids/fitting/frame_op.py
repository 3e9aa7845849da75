"""A frame-level operator as the frame-level stage (:mod:`fbrapids.features.fitted`) runs it.

Its :class:`~fbrapids.kernels.operator.Operator` says which kind it is (its ``stage``:
``fitted``, ``history`` or ``row``); its :class:`FrameOperator`, declared beside its
algorithm (:mod:`~fbrapids.fitting.encoders`, :mod:`~fbrapids.fitting.history`,
:mod:`~fbrapids.fitting.rowops`), says the rest: the expressions its inputs are computed
from, their column roles, the parameters its algorithm takes, the dtype of its output, a
state shared across calls, whether it reads labels, and a check of its inputs.

The operators by name: :func:`fbrapids.fitting.registry.frame_operator`.

Example:
    >>> import pandas as pd
    >>> op = FrameOperator("window_count", "i64", roles=("a0", "a1", "a3"), kept_params=("window",))
    >>> op.role_names(3), op.dtype({}, pd.DataFrame())
    (['a0', 'a1', 'a3'], dtype('int64'))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.kernels import Call, Expr

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.fitting.encoders import FittedSpec
    from fbrapids.frames.backend import DtypeObj, EagerFrame

#: the output dtypes an ``out_type`` names ("i64?": nullable int64, as Arrow)
DTYPES: dict[str, DtypeObj] = {"i64": np.dtype(np.int64), "i32": np.dtype(np.int32), "f64": np.dtype(np.float64),
                          "i64?": pd.ArrowDtype(pa.int64())}


@dataclass(frozen=True)
class FrameOperator:
    """How one frame-level operator is computed over frames.

    Attributes:
        name: its operator's name.
        out_type: its output's dtype (:data:`DTYPES`), unless ``out_dtype`` says it.
        run: ``(inputs, **params) -> Series`` for a history or row operator.
        spec: ``params -> FittedSpec`` for a fitted operator.
        roles: the input columns' names by argument (None: ``a0``, ``a1``, ...).
        kept_params: the parameters its algorithm takes (None: all of them).
        out_dtype: ``(columns by role, meta) -> dtype`` where it depends on the inputs.
        inputs: ``(call, training) -> expressions`` its inputs are computed from (None: its
            arguments).
        shared_state: the parameter naming a state several calls share (``vocab``).
        uses_labels: it reads labels: extracting the very frame it was fitted on leaks them.
        check: ``(meta, columns by role, call) -> None``: raises FeatureError on inputs it
            cannot compute.
        names_expr: its algorithm names the expression in its errors (an ``expr`` parameter).
    """

    name: str
    out_type: str = "f64"
    run: Callable[..., pd.Series] | None = None
    spec: Callable[[Mapping[str, object]], FittedSpec] | None = None
    roles: tuple[str, ...] | None = None
    kept_params: tuple[str, ...] | None = None
    out_dtype: Callable[[Mapping[str, str], EagerFrame], DtypeObj] | None = None
    inputs: Callable[[Call, bool], list[Expr]] | None = None
    shared_state: str | None = None
    uses_labels: bool = False
    check: Callable[[EagerFrame, Mapping[str, str], Call], None] | None = None
    names_expr: bool = False

    def input_exprs(self, call: Call, training: bool = True) -> list[Expr]:
        """The expressions the kernels compute for ``call``'s input columns."""
        return self.inputs(call, training) if self.inputs is not None else list(call.args)

    def role_names(self, n: int) -> list[str]:
        """The names of ``n`` input columns, by argument."""
        return list(self.roles[:n]) if self.roles is not None else [f"a{i}" for i in range(n)]

    def dtype(self, cols: Mapping[str, str], meta: EagerFrame) -> DtypeObj:
        """Its output's dtype, given its input columns (``cols``: role -> column of ``meta``)."""
        return self.out_dtype(cols, meta) if self.out_dtype is not None else DTYPES[self.out_type]

    def params(self, call: Call) -> dict[str, object]:
        """The parameters its algorithm takes from ``call`` (a carried state left out)."""
        p = call.param_dict()
        p.pop("state", None)
        if self.names_expr:
            p["expr"] = str(call)
        return p if self.kept_params is None else {k: v for k, v in p.items() if k in self.kept_params}

    def state_key(self, call: Call) -> str | None:
        """The name of the state ``call`` shares with others (``vocab-<name>``), or None."""
        shared = call.param_dict().get(self.shared_state) if self.shared_state else None
        return f"{self.shared_state}-{shared}" if shared else None

