"""Fitted state as data: named numpy tables plus JSON metadata, saved as ``.npz`` + ``.json``.

Nothing here is pickled: :func:`save_states` writes the tables with
``numpy.savez`` (numbers and fixed-width unicode only) and the metadata as JSON, and
:func:`load_states` reads them back with ``allow_pickle=False``, so loading fitted state
runs no code.

Example:
    >>> import tempfile, numpy as np
    >>> s = FittedState("count_encode", {"n_keys": 1}, {"k0": np.array([3, 5]), "count": np.array([2, 1])},
    ...                 {"rows": 3})
    >>> d = tempfile.mkdtemp(); save_states({"f1": s}, d)
    >>> t = load_states(d)["f1"]
    >>> t.op, t.tables["count"].tolist(), t.meta["rows"]
    ('count_encode', [2, 1], 3)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, NotRequired, TypedDict

import numpy as np

from fbrapids.errors import FittedStateError

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import pandas as pd

STATE_JSON = "fitted.json"
STATE_NPZ = "fitted.npz"
FORMAT = 1


@dataclass
class LookupCache:
    """What a state's lookups build once and reuse (never saved).

    Attributes:
        kinds: key table name -> the kind of its values (``"text"``, ``"int"``, ...; None: empty).
        indexes: key tables (and how each is compared) -> the index its lookups probe.
        by_fold: a target encoding's (label sums, counts) per (key tuple, fold).
    """

    kinds: dict[str, str | None] = field(default_factory=dict)
    indexes: dict[str, pd.Index] = field(default_factory=dict)
    by_fold: tuple[np.ndarray, np.ndarray] | None = None


@dataclass
class FittedState:
    """The statistics one fitted operator learned: ``tables`` (numpy arrays) and ``meta``
    (JSON values: rows fitted on, time range, priors, ...)."""

    op: str
    params: dict[str, object]
    tables: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, object] = field(default_factory=dict)
    cache: LookupCache = field(default_factory=LookupCache, repr=False, compare=False)  # not saved

    @property
    def nbytes(self) -> int:
        """Bytes held by the tables."""
        return int(sum(a.nbytes for a in self.tables.values()))

    def describe(self) -> str:
        """One line: operator, table sizes, rows and time range fitted on.

        Example:
            >>> FittedState("normalize", {}, {}, {"rows": 10, "mean": 1.5}).describe()
            'normalize: 0 bytes; fitted on 10 rows; mean=1.5'
        """
        sizes = ", ".join(f"{k} x{len(v)}" for k, v in self.tables.items())
        parts = [f"{self.op}: {sizes + ' ' if sizes else ''}{self.nbytes:,} bytes",
                 f"fitted on {self.meta.get('rows', '?'):,} rows" if isinstance(self.meta.get("rows"), int)
                 else "fitted on ? rows"]
        if self.meta.get("time_min") is not None:
            parts.append(f"time [{self.meta['time_min']}, {self.meta['time_max']}] ({self.meta.get('time_column')})")
        extra = [f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.meta.items()
                 if k in ("mean", "std", "min", "max", "median", "prior", "folds", "kept", "seen")]
        return "; ".join(parts + extra)


class SavedState(TypedDict):
    """One state in ``fitted.json``: its tables are in ``fitted.npz`` under ``<id>/<name>``."""

    op: str
    params: dict[str, object]
    tables: list[str]
    text: NotRequired[list[str]]  # the tables stored as UTF-8 bytes + offsets (absent: none)
    meta: dict[str, object]


class StateDocument(TypedDict, total=False):
    """``fitted.json``: the format, the states, and what the caller of :func:`save_states`
    added (:meth:`fbrapids.features.fitted.Fitted.save`: the feature expressions as JSON,
    and what the fit saw)."""

    format: int
    states: dict[str, SavedState]
    features: dict[str, object]
    info: dict[str, object]


def _jsonable(v: object) -> object:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, tuple):
        return list(v)
    return v


def _utf8(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Strings as their UTF-8 bytes and offsets (numpy's fixed-width text would drop
    trailing NULs, merging ``"a"`` and ``"a\\x00"``)."""
    data = [v.encode("utf-8", "surrogatepass") for v in arr.tolist()]
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in data])
    return np.frombuffer(b"".join(data), dtype=np.uint8), offsets


def _from_utf8(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    raw = data.tobytes()
    return np.asarray([raw[a:b].decode("utf-8", "surrogatepass") for a, b in zip(offsets[:-1], offsets[1:])]
                      + [None], dtype=object)[:-1]


def save_states(states: Mapping[str, FittedState], directory: str | Path,
                extra: Mapping[str, object] | None = None) -> None:
    """Write ``states`` (id -> state) to ``directory`` as ``fitted.json`` + ``fitted.npz``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    saved: dict[str, SavedState] = {}
    doc: dict[str, object] = {"format": FORMAT, "states": saved, **dict(extra or {})}
    for sid, s in states.items():
        names, text = [], []
        for name, arr in s.tables.items():
            arr = np.asarray(arr)
            if arr.dtype == object and all(isinstance(v, str) for v in arr.tolist()):
                arrays[f"{sid}/{name}"], arrays[f"{sid}/{name}.offsets"] = _utf8(arr)
                names.append(name)
                text.append(name)
                continue
            if arr.dtype.kind not in "biufU":
                raise FittedStateError(f"fitted state {sid} ({s.op}): table {name!r} has dtype {arr.dtype}, "
                                       "not a number or text array")
            arrays[f"{sid}/{name}"] = arr
            names.append(name)
        saved[sid] = {"op": s.op, "params": {k: _jsonable(v) for k, v in s.params.items()},
                              "tables": names, "text": text, "meta": {k: _jsonable(v) for k, v in s.meta.items()}}
    with open(d / STATE_NPZ, "wb") as f:
        np.savez(f, allow_pickle=True, **arrays)  # (numpy's default, named: its stubs type ** as this flag)
    (d / STATE_JSON).write_text(json.dumps(doc, indent=1))


def load_states(directory: str | Path) -> dict[str, FittedState]:
    """Read what :func:`save_states` wrote (no pickle: ``allow_pickle=False``).

    Raises:
        FittedStateError: a file is missing, or a table the JSON names is not in the npz.
    """
    d = Path(directory)
    doc = read_document(d)
    try:
        npz = np.load(d / STATE_NPZ, allow_pickle=False)
    except FileNotFoundError:
        raise FittedStateError(f"{d / STATE_NPZ}: missing (fitted state tables)") from None
    out: dict[str, FittedState] = {}
    with npz:
        for sid, s in doc["states"].items():
            tables = {}
            for name in s["tables"]:
                key = f"{sid}/{name}"
                text = name in s.get("text", ())
                for k in (key, f"{key}.offsets") if text else (key,):
                    if k not in npz.files:
                        raise FittedStateError(f"{d / STATE_NPZ}: table {k!r} named in {STATE_JSON} is missing")
                tables[name] = _from_utf8(npz[key], npz[f"{key}.offsets"]) if text else npz[key]
            out[sid] = FittedState(s["op"], dict(s["params"]), tables, dict(s["meta"]))
    return out


def read_document(directory: str | Path) -> StateDocument:
    """The JSON half of a saved fitted state (format checked)."""
    path = Path(directory) / STATE_JSON
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise FittedStateError(f"{path}: missing (fitted state)") from None
    except json.JSONDecodeError as exc:
        raise FittedStateError(f"{path}: not valid JSON ({exc})") from None
    if doc.get("format") != FORMAT:
        raise FittedStateError(f"{path}: format {doc.get('format')!r}, expected {FORMAT}")
    return doc
