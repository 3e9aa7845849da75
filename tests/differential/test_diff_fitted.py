"""Differential tests of the fitted operators against :mod:`diffref_fitted`.

Each case fits on a training frame and applies the frozen state to another frame (and,
for target encodings, out of fold to the training frame itself), eager and with the fit
and the extraction both on dask frames of 1, 3 and 7 partitions: the states must not
depend on the partitioning, and nothing is refitted on the frame being extracted.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, strategies as st

from fbrapids import ops

import diffref_fitted as ref
from diff_harness import DIFF, FAMILIES, assert_column, assert_error_names, assert_values, materialize, modes, to_mode
from diff_strategies import (
    BIG_IDS,
    INT_DTYPES,
    NULL_KINDS,
    STRING_STORAGES,
    indexes,
    int_series,
    ints_of,
    sizes,
    string_series,
    texts,
)


# -- inputs ------------------------------------------------------------------------------------
def _null(v: Any) -> Any:
    return None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v


@st.composite
def key_columns(draw: st.DrawFn, n_train: int, n_apply: int) -> tuple[list, list, Callable[..., pd.Series]]:
    """Training and applied values of one key column (a shared pool, so both repeats and
    unseen values occur) and the function that makes a series of them: integers of every
    width and flavour at their extremes, raw 64-bit ids (2^53 +- k, 2^63, 2^64 - 1) or
    strings of every storage (accents, CJK, emoji, NUL, trailing NUL, very long)."""
    kind = draw(st.sampled_from(["int", "bigid", "str"]))
    if kind == "str":
        storage = draw(st.sampled_from(STRING_STORAGES))
        base = draw(st.lists(texts(), min_size=1, max_size=6))
        pool = base + [b + "\x00" for b in base[:2]] + [""]
        nulls = list(NULL_KINDS)

        def make(vals: list, index: pd.Index | None = None) -> pd.Series:
            return string_series(vals, storage, index=index)
    else:
        dtype = "uint64" if kind == "bigid" else draw(st.sampled_from(INT_DTYPES))
        flavour = draw(st.sampled_from(["numpy", "nullable", "arrow"]))
        full = {"numpy": dtype, "nullable": dtype.capitalize().replace("Uint", "UInt"), "arrow": f"{dtype}[pyarrow]"}[flavour]
        pool = draw(st.lists(st.sampled_from(BIG_IDS) if kind == "bigid" else ints_of(dtype), min_size=1, max_size=6))
        nulls = [] if flavour == "numpy" else [None]

        def make(vals: list, index: pd.Index | None = None) -> pd.Series:
            return int_series(vals, full, index=index)
    value = st.sampled_from(pool)
    if nulls:
        value = st.one_of(value, st.sampled_from(nulls))
    all_null = bool(nulls) and draw(st.integers(0, 7)) == 0
    if all_null:
        value = st.sampled_from(nulls)
    train = draw(st.lists(value, min_size=n_train, max_size=n_train))
    unseen = texts(long=False) if kind == "str" else st.sampled_from(pool)
    apply = draw(st.lists(st.one_of(value, unseen), min_size=n_apply, max_size=n_apply))
    return train, apply, make


def _same_states(a: Any, b: Any, what: str) -> None:
    """Two fits' states are equal (float sums within rounding: summed in another order)."""
    assert a.states.keys() == b.states.keys(), what
    for sid, sa in a.states.items():
        sb = b.states[sid]
        assert sa.tables.keys() == sb.tables.keys(), f"{what}: {sid}"
        for name, ta in sa.tables.items():
            tb = sb.tables[name]
            same = (np.allclose(ta, tb, rtol=1e-12, atol=1e-12, equal_nan=True) if ta.dtype.kind == "f"
                    else ta.dtype == tb.dtype and ta.tolist() == tb.tolist())
            assert same, f"{what}: state {sid} table {name!r}: {ta!r} != {tb!r}"


def fit_apply(train: pd.DataFrame, target: pd.DataFrame, features: dict[str, Any], family: str, fit_in: str,
              oof: bool = True) -> Iterator[tuple[str, pd.DataFrame, pd.DataFrame | None]]:
    """``(mode, target's result, train's out-of-fold result)`` in each mode of ``family``:
    fitted on the eager ``train`` and, for mode ``fit_in``, on that mode's ``train`` (its
    states must equal the eager ones: a state never depends on the partitioning)."""
    base = modes(family)[0]
    fits = {base: to_mode(train, base).fbx.fit(**features)}
    fits[fit_in] = to_mode(train, fit_in).fbx.fit(**features)
    _same_states(fits[base], fits[fit_in], f"fitted eager vs {fit_in}")
    for mode in modes(family):
        try:
            fitted = fits.get(mode, fits[base])
            out = materialize(fitted.extract(to_mode(target, mode)), mode)
            own = materialize(fitted.extract(to_mode(train, mode), training=True), mode) if oof else None
            yield mode, out, own
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - re-raised with the mode named
            exc.add_note(f"[differential] raised in mode {mode!r}")
            raise


def _frame(cols: dict[str, pd.Series], n: int, index: pd.Index) -> pd.DataFrame:
    return pd.DataFrame({"rid": np.arange(n, dtype=np.int64), **{k: v.set_axis(index) for k, v in cols.items()}},
                        index=index)


# -- categorify, count_encode, target_encode ---------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_categorical_keys(family: str, data: st.DataObject) -> None:
    nt, na = data.draw(sizes(), label="train rows"), data.draw(sizes(), label="apply rows")
    ktrain, kapply, make = data.draw(key_columns(nt, na), label="key")
    k2train = data.draw(st.lists(st.sampled_from([0, 1, None]), min_size=nt, max_size=nt), label="key2")
    k2apply = data.draw(st.lists(st.sampled_from([0, 1, 2, None]), min_size=na, max_size=na), label="key2 apply")
    labels = data.draw(st.lists(st.one_of(st.sampled_from([0, 1, None]), st.floats(-1e6, 1e6)), min_size=nt,
                                max_size=nt), label="labels")
    min_freq = data.draw(st.sampled_from([1, 2, 3]))
    max_size = data.draw(st.sampled_from([None, 0, 1, 3]))
    oov = data.draw(st.sampled_from([0, 1, 3]))
    smoothing = data.draw(st.sampled_from([0.0, 1.0, 20.0]))
    seed = data.draw(st.sampled_from([0, 7]), label="fold seed")
    # a text row id (a null one now and then: fingerprint 0) seeds t2's folds, the int rid t's
    sids = [None if i == 0 and seed else f"r{i}\u00e9" for i in range(nt)]
    train = _frame({"k": make(ktrain), "k2": pd.Series(k2train, dtype="Int8"),
                    "y": pd.Series([_null(v) for v in labels], dtype="Float64"),
                    "sid": string_series(sids, "str")}, nt, data.draw(indexes(nt), label="train index"))
    apply = _frame({"k": make(kapply), "k2": pd.Series(k2apply, dtype="Int8")}, na, data.draw(indexes(na)))
    kt, ka = [_null(v) for v in ktrain], [_null(v) for v in kapply]
    yt = [_null(v) for v in labels]
    feats = {"c": ops.categorify("k", min_freq=min_freq, max_size=max_size, oov_buckets=oov),
             "n": ops.count_encode("k"), "n2": ops.count_encode("k", "k2"),
             "t": ops.target_encode("k", label="y", smoothing=smoothing, fold_by="rid"),
             "t2": ops.target_encode("k", "k2", label="y", smoothing=smoothing, fold_by="sid", folds=3, seed=seed)}
    want = {"c": ref.categorify(kt, ka, min_freq, max_size, oov),
            "n": ref.count_encode([(k,) for k in kt], [(k,) for k in ka]),
            "n2": ref.count_encode(list(zip(kt, k2train)), list(zip(ka, k2apply))),
            "t": ref.target_encode([(k,) for k in kt], yt, [(k,) for k in ka], smoothing),
            "t2": ref.target_encode(list(zip(kt, k2train)), yt, list(zip(ka, k2apply)), smoothing)}
    fit_in = data.draw(st.sampled_from(modes(family)[1:]), label="fit on")
    # out of fold on the training frame itself; folds as the docstring defines them
    want_oof = {"t": ref.target_encode_oof([(k,) for k in kt], yt, [ref.fold(i, 5) for i in range(nt)], smoothing),
                "t2": ref.target_encode_oof(list(zip(kt, k2train)), yt, [ref.fold(i, 3, seed) for i in sids],
                                            smoothing),
                "c": ref.categorify(kt, kt, min_freq, max_size, oov)}
    # float64 label sums: exact up to rounding unless labels of both signs cancel (inherent);
    # never by subtracting a fold from the total (same-sign labels stay within 1e-12)
    ys = [abs(y) for y in yt if y is not None]
    mixed = any(y is not None and y < 0 for y in yt) and any(y is not None and y > 0 for y in yt)
    atol = max(1e-12, nt * max(ys, default=0.0) * 2.0 ** -50) if mixed else 1e-12
    for mode, out, own in fit_apply(train, apply, feats, family, fit_in):
        for name, values in want.items():
            assert_column(out, name, values, mode=mode, rtol=1e-12, atol=atol if name[0] == "t" else 0,
                          order_by="rid")
        for name, values in want_oof.items():
            assert_column(own, name, values, mode=f"{mode} out of fold", rtol=1e-12, atol=atol, order_by="rid")


def test_out_of_fold_never_subtracts_a_large_label() -> None:
    """Out of fold, a row's encoding adds up the other folds' sums: a large label in its own
    fold (131072 here) never cancels the small ones (0.99) of the others (found by the
    thorough profile: total - own fold gave 0.14142857142724 for 0.14142857142857)."""
    labels = [0.0] * 9 + [0.99, 131072.0]
    sids = [f"r{i}\u00e9" for i in range(11)]
    train = pd.DataFrame({"k": [2**53 - 1] * 11, "y": labels, "sid": sids})
    want = ref.target_encode_oof([(2**53 - 1,)] * 11, labels, [ref.fold(i, 3) for i in sids], 0.0)
    for mode in ("eager", "dask3"):
        fitted = to_mode(train, mode).fbx.fit(t=ops.target_encode("k", label="y", smoothing=0.0, fold_by="sid",
                                                                  folds=3))
        got = materialize(fitted.extract(to_mode(train, mode), training=True), mode)["t"]
        assert_values(got, want, what=f"{mode}: out of fold", rtol=1e-15)


# -- quantile_bucketize, normalize, minmax, fill_null_fitted -----------------------------------------
@st.composite
def numeric_columns(draw: st.DrawFn, n_train: int, n_apply: int) -> tuple[list, list, Callable[..., pd.Series]]:
    """Training and applied numbers: integers of every width and flavour at their extremes
    (ids past 2^53 included), or floats with NaN; all-null now and then."""
    if draw(st.booleans()):
        dtype = draw(st.sampled_from(INT_DTYPES))
        flavour = draw(st.sampled_from(["numpy", "nullable", "arrow"]))
        full = {"numpy": dtype, "nullable": dtype.capitalize().replace("Uint", "UInt"), "arrow": f"{dtype}[pyarrow]"}[flavour]
        big = [b for b in BIG_IDS if b <= np.iinfo(dtype).max]
        value = st.one_of(ints_of(dtype), st.sampled_from(big)) if big else ints_of(dtype)
        if flavour != "numpy":
            value = st.one_of(value, st.none())
        nullable = flavour != "numpy"

        def make(vals: list, index: pd.Index | None = None) -> pd.Series:
            return int_series(vals, full, index=index)
    else:
        nullable = True
        value = st.one_of(st.floats(-1e12, 1e12), st.sampled_from([0.5, -0.0, 1e-300, 2.0 ** 60]), st.none())

        def make(vals: list, index: pd.Index | None = None) -> pd.Series:
            return pd.Series([np.nan if v is None else v for v in vals], dtype="float64", index=index)
    if nullable and draw(st.integers(0, 7)) == 0:  # all null
        value = st.none()
    pool = draw(st.lists(value, min_size=1, max_size=8))
    pick = st.sampled_from(pool)
    return (draw(st.lists(pick, min_size=n_train, max_size=n_train)),
            draw(st.lists(st.one_of(pick, value), min_size=n_apply, max_size=n_apply)), make)


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_numeric_statistics(family: str, data: st.DataObject) -> None:
    nt, na = data.draw(sizes(), label="train rows"), data.draw(sizes(), label="apply rows")
    xtrain, xapply, make = data.draw(numeric_columns(nt, na), label="x")
    buckets = data.draw(st.sampled_from([1, 2, 4, 10]))
    train = _frame({"x": make(xtrain)}, nt, data.draw(indexes(nt), label="train index"))
    apply = _frame({"x": make(xapply)}, na, data.draw(indexes(na), label="apply index"))
    feats = {"q": ops.quantile_bucketize("x", buckets), "z": ops.normalize("x"), "m": ops.minmax("x"),
             "f": ops.fill_null_fitted("x"), "md": ops.fill_null_fitted("x", "median")}
    want = {"q": ref.quantile_bucketize(xtrain, xapply, buckets), "z": ref.normalize(xtrain, xapply),
            "m": ref.minmax(xtrain, xapply), "f": ref.fill_null_fitted(xtrain, xapply),
            "md": ref.fill_null_fitted(xtrain, xapply, "median")}
    fit_in = data.draw(st.sampled_from(modes(family)[1:]), label="fit on")
    for mode, out, _ in fit_apply(train, apply, feats, family, fit_in, oof=False):
        for name, values in want.items():
            assert_column(out, name, values, mode=mode, rtol=1e-9, atol=1e-9, order_by="rid")


def test_state_fitted_on_ints_refuses_strings_and_compares_numbers_exactly() -> None:
    """Deliberate: a state fitted on integer keys refuses text keys (and the reverse),
    naming the column and both types, instead of answering all out of vocabulary; numbers
    of other types (uint64, float) match by exact value."""
    ids = [2**53 + 1, 2**64 - 1, 7]
    train = pd.DataFrame({"k": pd.Series(ids, dtype="uint64"), "s": ["1", "a\x00", "a"]})
    fitted = train.fbx.fit(c=ops.categorify("k"), n=ops.count_encode("k"), t=ops.count_encode("s"))
    for frame, culprit in ((pd.DataFrame({"k": [str(v) for v in ids], "s": ["1", "a", "b"]}), "'k'"),
                           (pd.DataFrame({"k": ids, "s": [1, 2, 3]}), "'s'")):
        for mode in ("eager", "dask3"):
            with pytest.raises(Exception) as info:
                materialize(fitted.extract(to_mode(frame, mode)), mode)
            assert_error_names(info.value, culprit)
    probe = pd.DataFrame({"k": pd.Series([float(2**53), 7.0, None, -1], dtype="object").astype("Float64"),
                          "s": ["a\x00", "a", "a\x00\x00", None]})
    out = fitted.extract(probe.assign(k=pd.Series([2**53, 7, None, 1], dtype="Int64")))
    assert out["n"].tolist() == [0, 1, 0, 0] and out["t"].tolist() == [1, 1, 0, 0]
    assert fitted.extract(probe)["n"].tolist() == [0, 1, 0, 0]  # float 2^53 is not the id 2^53 + 1


def test_fold_by_must_be_integers_or_text() -> None:
    """The folds hash ``fold_by``'s text (documented): a float or datetime row id, whose
    text is not an id, is refused naming the column, eager and on dask."""
    df = pd.DataFrame({"k": [1, 1, 2], "y": [1.0, 0.0, 1.0], "f": [0.5, 1.5, 2.5],
                       "d": pd.to_datetime([1, 2, 3], unit="s")})
    for col in ("f", "d"):
        for mode in ("eager", "dask3"):
            with pytest.raises(Exception) as info:
                to_mode(df, mode).fbx.fit(t=ops.target_encode("k", label="y", fold_by=col))
            assert_error_names(info.value, f"'{col}'")
    # a state whose folds were drawn by another rule (an older fbrapids) is refused out of fold
    fitted = df.fbx.fit(t=ops.target_encode("k", label="y", fold_by="k"))
    for state in fitted.states.values():
        state.meta.pop("fold_hash")
    assert fitted.extract(df[["k"]])["t"].notna().all()  # frozen statistics need no folds
    with pytest.raises(Exception) as info:
        fitted.extract(df, training=True)
    assert_error_names(info.value, "target_encode")
