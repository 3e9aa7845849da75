"""A view's JSON-lines files: the columns and dtypes planned from the first
``META_SAMPLE_ROWS`` records of every file (:func:`json_plan`), and one file read as pandas
by that plan (:func:`read_json_host`); the records themselves are parsed and turned into
columns by :mod:`fbrapids.views.jsonl`.

Example:
    >>> import tempfile
    >>> p = tempfile.mkdtemp() + "/v.jsonl"
    >>> _ = open(p, "w").write('{"id": 1, "t": "a"}\\n{"id": 2, "x": 0.5}\\n')
    >>> opts = CsvOptions(sep=None, header=True, names=None)
    >>> plan = json_plan([p], opts)
    >>> plan.keys, [plan.dtype(k) for k in plan.keys]
    (['id', 't', 'x'], ['int64', 'str', 'float64'])
    >>> read_json_host(p, ["id", "x"], opts, {"id": "int64", "x": "float64"}).to_dict("list")
    {'id': [1, 2], 'x': [nan, 0.5]}
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from fbrapids.errors import ViewError
from fbrapids.views import jsonl
from fbrapids.views.csv import META_SAMPLE_ROWS, CsvOptions
from fbrapids.views.dtype_spec import DtypeSpec
from fbrapids.views.paths import open_binary


@dataclass(frozen=True)
class JsonPlan:
    """The columns of a JSON-lines view and the values their dtypes are inferred from."""

    keys: list[str]  #: every key of the sampled records, in first-seen order
    samples: dict[str, jsonl.Values]  #: each key's sampled values
    first_file: str

    def dtype(self, key: str) -> str:
        """The dtype ``key``'s column reads as (inferred only for columns read without dtype=)."""
        return jsonl.infer_dtype(self.samples[key], self.first_file, key)


def _line_of(line: jsonl.Where, file: str | None) -> jsonl.Where:
    """Where a sampled value came from: its line number, named with its file when a view has several."""
    return line if file is None else f"line {line} of {file}"


def json_plan(files: Sequence[str], opts: CsvOptions) -> JsonPlan:
    """The columns of a JSON-lines view: the keys of the first ``META_SAMPLE_ROWS`` records
    of every file; their dtypes from the values of the first ``META_SAMPLE_ROWS`` records
    in all (and, for a key first seen later, of the file it is first seen in)."""
    values: dict[str, jsonl.Values] = {}
    kept = 0
    for f in files:
        recs = list(jsonl.records(f, functools.partial(open_binary, f, opts.compression), opts.text_encoding,
                                  META_SAMPLE_ROWS))
        keys = list(dict.fromkeys(k for _, r in recs for k in r))
        sample, n = jsonl.columns_of(recs, keys), len(recs)  # (n counts records without keys too)
        named = None if len(files) == 1 else f  # one file: its line numbers alone
        for k in keys:
            if k not in values and kept:  # first seen here: null in the records before
                values[k] = [(f"the records of the files before {f}", None)]
            if k not in values or kept < META_SAMPLE_ROWS:
                values.setdefault(k, []).extend((_line_of(line, named), v) for line, v in sample[k])
        if kept < META_SAMPLE_ROWS and n:
            for k in values.keys() - set(keys):  # a key this file never has is null in it
                values[k].append((f"a record of {f}", None))
        kept += n
    return JsonPlan(list(values), values, files[0])


def read_json_host(path: str, columns: list[str], opts: CsvOptions, dtype: dict[str, DtypeSpec],
                   nrows: int | None = None) -> pd.DataFrame:
    """One JSON-lines file as pandas, every column converted exactly to ``dtype``."""
    recs = list(jsonl.records(path, lambda: open_binary(path, opts.compression), opts.text_encoding, nrows))
    if opts.keys is not None:
        planned = set(opts.keys)
        for line, rec in recs:
            extra = [k for k in rec if k not in planned]
            if extra:
                raise ViewError(f"{path}: line {line} has key {extra[0]!r}, which is not among the view's columns "
                                f"(planned from the first {META_SAMPLE_ROWS} records of each file); pass "
                                f"columns=[...] to read only chosen ones")
    values = jsonl.columns_of(recs, columns)
    frame = pd.DataFrame({c: jsonl.to_column(values[c], dtype.get(c, "str"), path, c) for c in columns},
                         index=pd.RangeIndex(len(recs)))
    return frame
