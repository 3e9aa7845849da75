"""The dictionary path (``hash``, ``hash_bucket``, ``cross``, ``lookup``, ``split``,
``ngrams`` computed once per distinct value and scattered) against the row path and the
independent references of ``diffref_strings`` / ``diffref_rowops`` (pyfarmhash, plain
Python), on the differential suite's generated columns: every string storage (categorical
included: its codes are used as they come), integers of every width with nulls, values
drawn from a small pool so that they repeat.  Eager, and a dask frame of 3 partitions
(threads: the process-wide dictionary mode holds in its tasks).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import fbrapids  # noqa: F401  (the .fbx accessor)
from fbrapids import kernels, ops
from fbrapids.kernels import Vocabulary, dictionary_mode

import diffref_rowops as rowref
import diffref_strings as ref
from diff_harness import DIFF, assert_column, run_modes
from diff_strategies import int_columns, int_series, string_columns, string_series


def _repeat(draw: Any, pool: list[Any], n: int) -> list[Any]:
    """``n`` values drawn from ``pool`` (with repeats)."""
    return [pool[i] for i in draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n))]


def _clean(values: list[Any]) -> list[Any]:
    return [None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v for v in values]


@settings(DIFF, max_examples=min(DIFF.max_examples, 8))  # each example compiles its operators' own plans too
@given(data=st.data())
def test_dictionary_path_matches_rows_and_references(data: st.DataObject) -> None:
    """Forced on (every capable operator, every partition), the output equals the row
    path's (dtypes included) and the references, and counts the fingerprints it saved."""
    n = data.draw(st.integers(1, 40))
    pool, storage = data.draw(string_columns(data.draw(st.integers(1, 6)), long=False))
    words, storage2 = data.draw(string_columns(3, long=False))
    ints, idtype = data.draw(int_columns(4))
    s = _repeat(data.draw, pool, n)
    t = _repeat(data.draw, words, n)
    u = _repeat(data.draw, ints, n)
    sep = data.draw(st.sampled_from([" ", "é"]))  # few plans: each compiles its operators' own plans too
    b = data.draw(st.sampled_from([97, 2**63 - 1]))
    df = pd.DataFrame({"s": string_series(s, storage), "t": string_series(t, storage2), "u": int_series(u, idtype)})
    keys = list(dict.fromkeys(v for v in _clean(s) if v is not None))[:3]
    vocab = Vocabulary.from_values(keys, start=1, kind="str")
    feats = {"h": ops.hash("s"), "hb": ops.hash_bucket("u", b), "sp": ops.split("s", sep, buckets=b),
             "tok": ops.split("s", sep), "ng": ops.ngrams(ops.split("s", sep), 2, sep="+", buckets=0),
             "x": ops.cross("s", "u", "t", buckets=b), "lk": ops.lookup("s", vocab, oov=-7)}
    vs, ts, us = _clean(s), _clean(t), _clean(u)
    mapping = rowref.vocabulary_from_values(keys, start=1)
    want = {"h": [ref.hash(v) for v in vs], "hb": [ref.hash_bucket(v, b) for v in us],
            "sp": [ref.split(v, sep, b) for v in vs], "tok": [ref.split(v, sep) for v in vs],
            "ng": [ref.ngrams(ref.split(v, sep), 2, "+", 0) for v in vs],
            "x": [ref.cross([v, w, x], buckets=b) for v, w, x in zip(vs, us, ts)],
            "lk": [rowref.lookup(v, mapping, -7) for v in vs]}
    with dictionary_mode("off"):
        rows = df.fbx.extract(**feats)
    with dictionary_mode("on"):
        kernels.reset_stats()
        for mode, out in run_modes(df, lambda f: f.fbx.extract(**feats), "cpu", only=["eager", "dask3"]):
            for name, w in want.items():
                assert_column(out, name, w, mode=f"{mode}, dictionary path")
            for name in feats:
                assert str(out[name].dtype) == str(rows[name].dtype), f"{mode}: {name} dtype"
                assert out[name].reset_index(drop=True).equals(rows[name].reset_index(drop=True)), f"{mode}: {name}"
        st_on = kernels.stats()
    assert st_on["dictionary_runs"] > 0
    with dictionary_mode("off"):
        kernels.reset_stats()
        df.fbx.extract(**feats)
        row_hashes = kernels.stats()["hashes"]
    # per run (eager + dask), fingerprints taken + saved = those of the row path
    assert st_on["hashes"] + st_on["hashes_saved"] == 2 * row_hashes


def test_user_operator_named_like_a_builtin_stays_on_the_row_path() -> None:
    """Only the built-ins themselves are dictionary-capable: a plan's other operators,
    list inputs and user operators keep the row path."""
    plan = kernels.build_plan({"h": ops.hash("l"), "c": ops.cross("u", "l", buckets=8), "x": ops.hash_bucket("u", 8)},
                              {"l": "list<i64>", "u": "i64"})
    assert [n.expr.op for n in plan.dictionary_nodes] == ["hash_bucket"]
    assert kernels.build_plan({"x": ops.hash_bucket("u", 8)}, {"u": "i64"}, dictionary=False).dictionary_nodes == []


@pytest.mark.parametrize("value", ["sometimes", "ON "])
def test_bad_mode_is_an_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from fbrapids.errors import FbrapidsError
    from fbrapids.kernels.dictionary import mode

    monkeypatch.setenv("FBRAPIDS_DICTIONARY", value)
    if value.strip().lower() == "on":
        assert mode() == "on"
        return
    with pytest.raises(FbrapidsError, match="FBRAPIDS_DICTIONARY"):
        mode()
