"""The runtime interface every compiled plan implements: ``run(columns) -> RunResult``.

:class:`~fbrapids.kernels.runtime_host.HostPlan` (host C through ctypes) and
:class:`~fbrapids.kernels.runtime_cuda.CudaPlan` (CUDA through cupy) are the two; a new
runtime subclasses :class:`Runtime` and is chosen in :func:`fbrapids.kernels.compiled.compiled`.

Example:
    >>> from fbrapids.kernels.runtime_host import HostPlan
    >>> issubclass(HostPlan, Runtime)
    True
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Mapping, TypeAlias, Union

import numpy as np
import pandas as pd

from fbrapids.kernels import counters as S, types as T
from fbrapids.kernels.abi import LayerABI
from fbrapids.kernels.columns import HostColumn
from fbrapids.kernels.device_columns import DeviceColumn
from fbrapids.kernels.device_types import XArray
from fbrapids.kernels.plan import Plan

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import cudf

    from fbrapids.frames.backend import FrameLike

#: one input column of a run: a pandas or cudf series, or a column in the kernels' slot layout
#: (a :class:`~fbrapids.kernels.columns.HostColumn`, a :class:`~fbrapids.kernels.device_columns.DeviceColumn`)
InputColumn: TypeAlias = Union[pd.Series, "cudf.Series", HostColumn, DeviceColumn]
#: one output column of a run: a HostColumn from the host runtime, a cudf series from the CUDA runtime
OutputColumn: TypeAlias = Union[HostColumn, "cudf.Series"]


@dataclass
class RunResult:
    """Output columns by feature name, per-row status arrays by feature name, and counters.

    The columns are :class:`~fbrapids.kernels.columns.HostColumn` from the host runtime,
    device columns (cudf series) from the CUDA runtime.
    """

    columns: dict[str, OutputColumn]
    status: dict[str, XArray] = field(default_factory=dict)
    stats: S.KernelStats = field(default_factory=S.KernelStats)


class Runtime(abc.ABC):
    """A plan compiled for one target; ``stats`` accumulates over its runs."""

    plan: Plan
    stats: S.KernelStats

    @abc.abstractmethod
    def run(self, columns: Mapping[str, InputColumn] | FrameLike) -> RunResult:
        """Run every layer over ``columns`` (input name -> column, or a frame)."""


def row_pool_bytes(abi: LayerABI, outs: Mapping[int, Mapping[str, XArray]], rows: XArray,
                   xp: ModuleType = np) -> XArray:
    """Pool bytes each of ``rows`` used in one layer launch (for :class:`~fbrapids.kernels.pool.PoolSizer`).

    ``outs`` holds each output's buffers by slot name; ``xp`` is numpy or cupy.
    """
    total = xp.zeros(len(rows), dtype=xp.float64)
    for nid, o in abi.outputs.items():
        if not T.is_var(o.type):
            continue
        b = outs[nid]
        total += b["cnt"][rows] * (1 if o.type == "str" else 8)
        if o.type == "list<str>":
            total += b["cnt2"][rows]
    return total
