"""The kernel core: feature expressions -> a typed, layered DAG -> meta-kernels (host C via
gcc + OpenMP, CUDA via NVRTC) -> runtimes that run them over column buffers.  It knows no
frames (dask, categorify fitting, FeatureSet and explain live in :mod:`fbrapids.features`).

The rest of fbrapids uses this public face, not the submodules:

* expressions: :class:`Expr`, :class:`Col`, :class:`Call`, :func:`as_expr`, :func:`columns_of`;
* operators: :class:`Operator` (and its :class:`DictionaryPath`), :class:`Impl`, :func:`register_operator`, :func:`add_operator`,
  :func:`get_operator`, :func:`find_operator`, :func:`operators`, :class:`Vocabulary`;
* planning and rendering: :func:`build_plan`, :class:`Plan`, :func:`render_module`,
  :data:`DEVICE_BUDGET_FRACTION`;
* runtimes: :class:`Runtime`, :class:`RunResult`, :func:`compiled`, :func:`cached`,
  :class:`HostColumn`, :func:`to_series`, :func:`empty_series`, :func:`from_arrow_type`;
* building: :func:`load_source` (host C through the compile-and-cache path);
* row takes of Arrow strings / lists: :func:`take_var_width`, :func:`fill_null_var_width`,
  :func:`takes_type` (see :mod:`fbrapids.kernels.arrow_take`); large host buffers in plain
  pages, reused once freed: :func:`host_empty` (:mod:`fbrapids.kernels.host_memory`);
* counters: :class:`KernelStats`, :func:`stats`, :func:`reset_stats`;
* the dictionary path: :func:`dictionary_mode`, :func:`dictionary_paths` (see
  :mod:`fbrapids.kernels.dictionary`).

Where things go: a new operator is one module of ``builtins/`` declaring its :class:`Operator` (C in
``csrc/ops/``); a new runtime as a
:class:`Runtime` subclass chosen in ``compiled.py``; the buffer ABI in ``abi.py``.

Example:
    >>> from fbrapids import kernels
    >>> kernels.reset_stats(); kernels.stats()["launches"]
    0
"""

from fbrapids.kernels.arrow_take import fill_null_var_width, take_var_width, takes_type
from fbrapids.kernels.columns import HostColumn, empty_series, from_series, object_array, to_series
from fbrapids.kernels.compile_host import load_source
from fbrapids.kernels.compiled import cached, cached_plans, compilations, compiled
from fbrapids.kernels.counters import KernelStats, record, reset_stats, stats
from fbrapids.kernels.dictionary import describe as dictionary_paths, dictionary_mode
from fbrapids.kernels.expr import Call, Col, Expr, as_expr, columns_of
from fbrapids.kernels.host_memory import empty as host_empty
from fbrapids.kernels.operator import DictionaryPath, Impl, Operator
from fbrapids.kernels.plan import DEVICE_BUDGET_FRACTION, Plan, build_plan
from fbrapids.kernels.registry import (
    add_operator,
    find_operator,
    get_operator,
    operators,
    register_operator,
    registry_generation,
)
from fbrapids.kernels.render import render_module
from fbrapids.kernels.runtime import RunResult, Runtime
from fbrapids.kernels.types import from_arrow as from_arrow_type
from fbrapids.kernels.vocab import Vocabulary

__all__ = [
    "Call", "Col", "DEVICE_BUDGET_FRACTION", "DictionaryPath", "Expr", "HostColumn", "Impl", "KernelStats", "Operator", "Plan",
    "RunResult", "Runtime", "Vocabulary", "add_operator", "as_expr", "build_plan", "cached", "cached_plans",
    "columns_of", "compilations", "compiled", "dictionary_mode", "dictionary_paths", "empty_series", "fill_null_var_width", "find_operator", "from_series", "from_arrow_type", "get_operator", "load_source",
    "object_array", "operators", "record", "register_operator", "registry_generation", "render_module", "host_empty", "reset_stats", "stats", "take_var_width", "takes_type", "to_series",
]
