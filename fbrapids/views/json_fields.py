"""Pull string fields out of a column of JSON documents, counting what could not be read.

``extract_json(series, {"os": "device.os"})`` returns one string series per output name
(null where the input is null, does not parse as strict JSON, lacks the path, or holds a
non-string there) and the counts of each case.  Strictness follows section 3 of the
canonical workload: RFC 8259, the whole text one JSON value, no NaN/Infinity literals.

This first implementation parses each *distinct* document once with Python's json
module (logs repeat a lot, so the distinct set is small) and maps the answers back.

Example:
    >>> import pandas as pd
    >>> s = pd.Series(['{"a": {"b": "x"}}', '{"a": 1}', "nope", None], dtype="str")
    >>> out, counts = extract_json(s, {"ab": "a.b"})
    >>> out["ab"].tolist(), counts["malformed"], counts["missing:ab"]
    (['x', nan, nan, nan], 1, 1)
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from fbrapids import backend as _backend

_MALFORMED = object()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON literal {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _parse(doc: str) -> Any:
    try:
        return _DECODER.decode(doc)
    except (ValueError, RecursionError):
        return _MALFORMED


def _walk(value: Any, keys: list[str]) -> tuple[str | None, str]:
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None, "missing"
        value = value[key]
    if not isinstance(value, str):
        return None, "not_string"
    return value, "ok"


def count_keys(names: list[str]) -> list[str]:
    """The keys of the counts dict for the given output names (all start at 0)."""
    return ["rows", "null_input", "malformed"] + [f"{k}:{n}" for n in names for k in ("missing", "not_string")]


def extract_json(series: Any, paths: dict[str, str]) -> tuple[dict[str, Any], dict[str, int]]:
    """Extract dotted ``paths`` from the JSON strings in ``series``.

    Args:
        series: a pandas or cudf string series.
        paths: output name -> dotted path of object keys (``"device.os"``).

    Returns:
        ``(columns, counts)``: a string series per output name on the series' backend, and
        counts ``rows``, ``null_input``, ``malformed``, ``missing:<name>``,
        ``not_string:<name>``.
    """
    be = _backend.backend_of(series)
    host = _backend.to_host(series)
    counts = dict.fromkeys(count_keys(list(paths)), 0)
    counts["rows"] = int(len(host))
    null_mask = host.isna().to_numpy()
    counts["null_input"] = int(null_mask.sum())
    codes, uniques = pd.factorize(host, use_na_sentinel=True)
    parsed = [_parse(u) for u in uniques]
    malformed_u = np.array([p is _MALFORMED for p in parsed], dtype=bool)
    valid_codes = codes >= 0
    counts["malformed"] = int(np.bincount(codes[valid_codes], minlength=len(uniques))[malformed_u].sum()) if len(uniques) else 0
    freq = np.bincount(codes[valid_codes], minlength=len(uniques)) if len(uniques) else np.zeros(0, dtype=np.int64)
    out: dict[str, Any] = {}
    for name, path in paths.items():
        keys = path.split(".")
        values = np.empty(len(uniques) + 1, dtype=object)
        values[-1] = None  # code -1 (null input) indexes the last slot
        for i, doc in enumerate(parsed):
            if doc is _MALFORMED:
                values[i] = None
                continue
            value, status = _walk(doc, keys)
            values[i] = value
            if status != "ok":
                counts[f"{status}:{name}"] += int(freq[i])
        col = pd.Series(values[codes], index=host.index, dtype="str", name=name)
        out[name] = _backend.to_backend(col, be) if be.is_gpu else col
    return out, counts
