"""Pull string fields out of a column of JSON documents, counting what could not be read.

``extract_json(series, {"os": "device.os"})`` returns one string series per output name
(null where the input is null, does not parse as strict JSON, lacks the path, or holds a
non-string there) and the counts of each case.  Strictness follows section 3 of the
canonical workload: RFC 8259, the whole text one JSON value, no NaN/Infinity literals.

The parsing runs in the ``json_get`` meta-kernel (``csrc/json_path.h``), one plan for all
the paths of a column: host C with OpenMP on the CPU backend, the same device functions
as CUDA on the GPU backend (the CUDA plan reads the cudf column in place, and the counts
are computed on the device and read back in one small transfer), so both give the same
answers.  Each ``json_get`` also writes
a per-row status (0 found, 1 malformed, 2 missing, 3 not a string) the counts come from.

What is null, and counted (``clean_report(frame).counts["json"][source]``):

* ``malformed``: the document is not strict JSON;
* ``too_deep``: the document nests more than ``MAX_DEPTH`` (64) arrays / objects, the
  parser's bound; counted apart from ``malformed`` (the text may be valid JSON);
* ``missing:<name>``: the path is absent;
* ``not_string:<name>``: the path holds a number, a boolean, null, an object or an
  array, not a string.  Such a leaf is read as null, never as its JSON text, so that
  ``"1"`` and ``1`` stay apart; the count says how many rows that was.

Example:
    >>> import pandas as pd
    >>> s = pd.Series(['{"a": {"b": "x"}}', '{"a": 1}', "nope", None], dtype="str")
    >>> out, counts = extract_json(s, {"ab": "a.b"})
    >>> out["ab"].tolist(), counts["malformed"], counts["missing:ab"]
    (['x', nan, nan, nan], 1, 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fbrapids import backend as _backend

_STATUS_MALFORMED, _STATUS_MISSING, _STATUS_NOT_STRING = 1, 2, 3
MAX_DEPTH = 64  #: FBX_JSON_MAX_DEPTH of csrc/json_path.h


def count_keys(names: list[str]) -> list[str]:
    """The keys of the counts dict for the given output names (all start at 0)."""
    return (["rows", "null_input", "malformed", "too_deep"]
            + [f"{k}:{n}" for n in names for k in ("missing", "not_string")])


def nesting_depth(doc: str) -> int:
    """The deepest nesting of arrays / objects in ``doc`` (brackets inside strings ignored).

    Example:
        >>> nesting_depth('{"a": [1, {"b": "[[["}]}'), nesting_depth("x")
        (3, 0)
    """
    depth = deepest = 0
    in_str = esc = False
    for ch in doc:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _too_deep(docs: Any) -> int:
    """How many of the (malformed) documents nest deeper than MAX_DEPTH."""
    return sum(1 for d in docs if isinstance(d, str) and nesting_depth(d) > MAX_DEPTH)


def extract_json(series: Any, paths: dict[str, str]) -> tuple[dict[str, Any], dict[str, int]]:
    """Extract dotted ``paths`` from the JSON strings in ``series``.

    Args:
        series: a pandas or cudf string series.
        paths: output name -> dotted path of object keys (``"device.os"``).

    Returns:
        ``(columns, counts)``: a string series per output name on the series' backend, and
        counts ``rows``, ``null_input``, ``malformed``, ``too_deep``, ``missing:<name>``,
        ``not_string:<name>`` (see the module doc).
    """
    from fbrapids.kernels import Call, Col, build_plan, compiled, to_series

    feats = {name: Call("json_get", (Col("doc"),), (("path", path), ("with_status", True)))
             for name, path in paths.items()}
    counts = dict.fromkeys(count_keys(list(paths)), 0)
    counts["rows"] = int(len(series))
    be = _backend.backend_of(series)
    if be.is_gpu and _backend.is_gpu_object(series):
        # the CUDA plan on the device: documents read in place, counts computed there
        doc = series if str(series.dtype) in ("str", "string", "object") else series.astype("str")
        counts["null_input"] = int(doc.null_count)
        if not paths:
            return {}, counts
        res = compiled(build_plan(feats, {"doc": "str"}, backend="gpu")).run({"doc": doc})
        xp = be.xp
        bins = xp.stack([xp.bincount(res.status[name][res.status[name] >= 0].astype(xp.int64), minlength=4)[:4]
                         for name in paths]).get()  # every count in one small device-to-host read
        out = {name: res.columns[name] for name in paths}
        first = res.status[next(iter(paths))]
        bad = be.xp.flatnonzero(first == _STATUS_MALFORMED)
        counts["too_deep"] = _too_deep(doc.iloc[bad].to_pandas()) if len(bad) else 0  # the few malformed rows only
    else:
        host = _backend.to_host(series)
        if not (isinstance(host.dtype, pd.StringDtype) or str(host.dtype) in ("str", "string")):
            host = host.astype("str")
        counts["null_input"] = int(host.isna().sum())
        if not paths:
            return {}, counts
        frame = pd.DataFrame({"doc": host.array}, index=host.index, copy=False)
        res = compiled(build_plan(feats, {"doc": "str"})).run(frame)
        bins = np.stack([np.bincount(res.status[name][res.status[name] >= 0].astype(np.int64), minlength=4)[:4]
                         for name in paths])
        out = {name: to_series(res.columns[name], host.index, name) for name in paths}
        bad = np.flatnonzero(res.status[next(iter(paths))] == _STATUS_MALFORMED)
        counts["too_deep"] = _too_deep(host.iloc[bad]) if len(bad) else 0  # the few malformed rows only
    for i, name in enumerate(paths):
        if i == 0:  # the whole document is validated for every path; too deep is counted apart
            counts["malformed"] = int(bins[i][_STATUS_MALFORMED]) - counts["too_deep"]
        counts[f"missing:{name}"] = int(bins[i][_STATUS_MISSING])
        counts[f"not_string:{name}"] = int(bins[i][_STATUS_NOT_STRING])
    return out, counts
