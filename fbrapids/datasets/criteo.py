"""The Criteo display-ad log with the DLRM paper's preprocessing, as feature expressions.

Criteo rows are ``label, I1..I13, C1..C26``: 13 integer counts (empty when missing, some
written as ``260.0``, a few negative) and 26 categorical values as 8-digit hex strings.
DLRM's reference preprocessing (``dlrm_data_pytorch.py``) takes ``log(1 + x)`` of the
counts with missing and negative values as 0, and uses the categorical hex values as ids.
Here the ids are the raw 64-bit values of the hex strings (``int(c, 16)``) — no modulo —
computed by a user-defined C operator, ``hex_id``, registered from a snippet; an empty
category reads id 0.

Registered as the data set ``"criteo"`` (a workload file's ``features.dataset = "criteo"``).

Example:
    >>> f = features()
    >>> len(f), str(f["C1_id"])
    (39, 'fill_null(hex_id(C1), value=0)')
    >>> DATASET.name
    'criteo'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fbrapids import ops
from fbrapids.kernels import Expr, register_operator
from fbrapids.workloads.dataset_registry import Dataset, register_dataset

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.frames.backend import FrameLike

DENSE_IN = [f"I{i}" for i in range(1, 14)]
SPARSE_IN = [f"C{i}" for i in range(1, 27)]
DENSE = [f"{c}_log" for c in DENSE_IN]
SPARSE = [f"{c}_id" for c in SPARSE_IN]
LABEL = "label"

HEX_ID = register_operator(
    "hex_id", "str s", "u64 id",
    """
    for (fbx_i64 i = 0; i < s.n; ++i) {
      char c = s.p[i];
      fbx_u64 d = (c >= '0' && c <= '9') ? (fbx_u64)(c - '0')
                : (c >= 'a' && c <= 'f') ? (fbx_u64)(c - 'a' + 10)
                : (c >= 'A' && c <= 'F') ? (fbx_u64)(c - 'A' + 10) : 0;
      id = (id << 4) | d;
    }
    """,
    doc="The unsigned 64-bit value of a hex string (the low 64 bits of longer ones); "
        "non-hex characters count as 0. Null rule: null in, null out.",
    replace=True,
)


def features() -> dict[str, Expr]:
    """DLRM preprocessing of a Criteo frame: ``I*_log`` dense values and ``C*_id`` raw ids."""
    out: dict[str, Expr] = {}
    for c in DENSE_IN:
        out[f"{c}_log"] = ops.cast(ops.log1p(ops.clip(ops.fill_null(ops.cast(c, "f64"), 0.0), 0.0, 1e300)), "f32")
    for c in SPARSE_IN:
        out[f"{c}_id"] = ops.fill_null(ops.call("hex_id", c), 0)
    return out


#: the data set a workload file names with ``features.dataset = "criteo"``
DATASET = register_dataset(Dataset("criteo", features))


def read_criteo(path: str | Path, eager: bool = True) -> FrameLike:
    """Read a Criteo CSV sample (with its header) as a view; see :func:`fbrapids.read_view`."""
    from fbrapids.views.read import read_view

    return read_view(path, dtype={c: "str" for c in SPARSE_IN}, eager=eager)
