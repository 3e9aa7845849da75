"""Pull string fields out of a column of JSON documents, counting what could not be read.

``extract_json(series, {"os": "device.os"})`` returns one string series per output name
(null where the input is null, does not parse as strict JSON, lacks the path, or holds a
non-string there) and the counts of each case.  Strictness follows section 3 of the
canonical workload: RFC 8259, the whole text one JSON value, no NaN/Infinity literals.

The parsing runs in one meta-kernel plan for all the paths of a column (``csrc/json_path.h``):
``json_scan`` walks each document ONCE, validating it and finding up to 4 paths, whose
places it packs in one int64 per row, and ``json_pick`` copies each found string out
without parsing again.  Host C with OpenMP on the CPU backend, the same device functions
as CUDA on the GPU backend (the CUDA plan reads the cudf column in place, and the counts
are computed on the device and read back in one small transfer), so both give the same
answers.  Each ``json_pick`` also
writes a per-row status (0 found, 1 malformed, 2 missing, 3 not a string, 4 too deep) the
counts come from.

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

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from fbrapids.frames import backend as _backend

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.frames.backend import EagerSeries, SeriesLike
    from fbrapids.kernels import Call

_STATUS_MALFORMED, _STATUS_MISSING, _STATUS_NOT_STRING, _STATUS_TOO_DEEP = 1, 2, 3, 4
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


def json_features(paths: dict[str, str], source: str = "doc") -> dict[str, Call]:
    """The plan's features for ``paths`` of the JSON column ``source``: one ``json_scan``
    (one strict-JSON walk per document) per 4 paths, and a ``json_pick`` per path, which
    copies the value the scan found without parsing again (it walks the document for its
    own path only when the value sits too far into it for the scan's code: past 512 MiB
    with 2 paths in the scan, 8 KiB with 4).

    Example:
        >>> feats = json_features({"os": "device.os", "city": "geo.city"})
        >>> feats["os"].args[1] is feats["city"].args[1]  # one scan, read by both picks
        True
        >>> str(feats["city"].args[1])
        "json_scan(doc, paths=('device.os', 'geo.city'))"
    """
    from fbrapids.kernels import Call, Col
    from fbrapids.kernels.builtins import JSON_SCAN_PATHS

    feats: dict[str, Call] = {}
    names = list(paths)
    for g in range(0, len(names), JSON_SCAN_PATHS):
        group = names[g: g + JSON_SCAN_PATHS]
        scan = Call("json_scan", (Col(source),), (("paths", tuple(paths[n] for n in group)),))
        for k, name in enumerate(group):
            feats[name] = Call("json_pick", (Col(source), scan), (("index", k), ("group", len(group)),
                                                                   ("path", paths[name]), ("with_status", True)))
    return feats


def extract_json(series: SeriesLike, paths: dict[str, str]) -> tuple[dict[str, EagerSeries], dict[str, int]]:
    """Extract dotted ``paths`` from the JSON strings in ``series``.

    Args:
        series: a pandas or cudf string series.
        paths: output name -> dotted path of object keys (``"device.os"``).

    Returns:
        ``(columns, counts)``: a string series per output name on the series' backend, and
        counts ``rows``, ``null_input``, ``malformed``, ``too_deep``, ``missing:<name>``,
        ``not_string:<name>`` (see the module doc).
    """
    from fbrapids.kernels import build_plan, compiled, to_series

    feats = json_features(paths)
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
        bins = xp.stack([xp.bincount(res.status[name][res.status[name] >= 0].astype(xp.int64), minlength=5)[:5]
                         for name in paths]).get()  # every count in one small device-to-host read
        out = {name: res.columns[name] for name in paths}
    else:
        host = _backend.to_host(series)
        if not (isinstance(host.dtype, pd.StringDtype) or str(host.dtype) in ("str", "string")):
            host = host.astype("str")
        counts["null_input"] = int(host.isna().sum())
        if not paths:
            return {}, counts
        frame = pd.DataFrame({"doc": host.array}, index=host.index, copy=False)
        res = compiled(build_plan(feats, {"doc": "str"})).run(frame)
        # int8 statuses read as uint8 (a null row's -1 as 255): one bincount, no mask or copy
        bins = np.stack([np.bincount(res.status[name].view(np.uint8), minlength=5)[:5] for name in paths])
        out = {name: to_series(res.columns[name], host.index, name) for name in paths}
    for i, name in enumerate(paths):
        if i == 0:  # a document malformed (or too deep) is so for every path
            counts["malformed"] = int(bins[i][_STATUS_MALFORMED])
            counts["too_deep"] = int(bins[i][_STATUS_TOO_DEEP])
        counts[f"missing:{name}"] = int(bins[i][_STATUS_MISSING])
        counts[f"not_string:{name}"] = int(bins[i][_STATUS_NOT_STRING])
    return out, counts
