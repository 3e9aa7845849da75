"""Row takes of the joins and of clean's filters (fbrapids.views.rows, fbrapids.kernels.arrow_take)
against pyarrow's ``take``, pandas' ``take`` / boolean selection and pandas' ``merge``, on
hypothesis-generated columns: list<int64> / list<int32> / string columns with nulls and empty
lists, chunked and sliced arrays, every-row / no-row / random / sorted subsets.

The kernels' size threshold (``frame_rows.MIN_ROWS``) is set to 0 so that small generated
frames go through them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fbrapids  # noqa: F401  (the .fbx accessor)
from fbrapids.joins.hash_join import join_frames
from fbrapids.kernels import host_memory
from fbrapids.kernels.arrow_take import take_var_width
from fbrapids.views import rows as frame_rows
from fbrapids.views.rows import fill_null_strings, filter_rows, take_array, take_rows

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIST_TYPES = [pa.list_(pa.int64()), pa.large_list(pa.int32()), pa.list_(pa.float64())]
STRING_TYPES = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]


@pytest.fixture(autouse=True)
def _kernels_for_small_frames(monkeypatch):
    monkeypatch.setattr(frame_rows, "MIN_ROWS", 0)


def _lists(n: int):
    return st.lists(st.one_of(st.none(), st.lists(st.integers(-2**31, 2**31 - 1), max_size=4)), min_size=n, max_size=n)


def _strings(n: int):
    return st.lists(st.one_of(st.none(), st.text(max_size=5)), min_size=n, max_size=n)


@st.composite
def arrow_columns(draw, kinds=LIST_TYPES + STRING_TYPES):
    """A list or string column, maybe sliced, maybe chunked (chunks possibly sliced too)."""
    n = draw(st.integers(0, 40))
    kind = draw(st.sampled_from(kinds))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        arr = pa.array(draw(_lists(n)), kind)
    else:
        values = draw(_strings(n))
        arr = pa.array([None if v is None else (v.encode() if pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
                                                else v) for v in values], kind)
    lo = draw(st.integers(0, n)); hi = draw(st.integers(lo, n))
    if draw(st.booleans()):
        arr = arr.slice(lo, hi - lo)
    if draw(st.booleans()) and len(arr) > 1:
        cut = draw(st.integers(0, len(arr)))
        arr = pa.chunked_array([arr.slice(0, cut), arr.slice(cut)], arr.type)
    return arr


@st.composite
def row_maps(draw, length: int, misses: bool):
    """Rows to take from ``length`` rows: every row in order, none, a sorted subset, or any (with repeats, and
    ``-1`` misses when allowed)."""
    how = draw(st.sampled_from(["all", "none", "sorted", "any"]))
    if how == "all" or length == 0 and how != "any":
        return np.arange(length if how == "all" else 0, dtype=np.int64)
    if how == "none":
        return np.zeros(0, dtype=np.int64)
    if how == "sorted":
        keep = draw(st.lists(st.booleans(), min_size=length, max_size=length))
        return np.flatnonzero(keep).astype(np.int64)
    lo = -1 if misses else 0
    if length == 0:
        return np.full(draw(st.integers(0, 3)), -1, dtype=np.int64) if misses else np.zeros(0, dtype=np.int64)
    return np.array(draw(st.lists(st.integers(lo, length - 1), max_size=50)), dtype=np.int64)


def _pyarrow_take(values, rows: np.ndarray):
    """pyarrow's own take, with ``-1`` as a null (the oracle)."""
    taken = pc.take(values, pa.array(rows, type=pa.int64(), mask=rows < 0))
    return taken.combine_chunks() if isinstance(taken, pa.ChunkedArray) else taken


@SETTINGS
@given(data=st.data())
def test_kernel_take_equals_pyarrow_take(data):
    values = data.draw(arrow_columns())
    rows = data.draw(row_maps(len(values), misses=True))
    got = take_var_width(values, rows)
    assert got is not None  # every generated type is one the kernel takes
    got.validate(full=True)
    want = _pyarrow_take(values, rows)
    assert got.type == values.type and got.equals(want)
    assert got.null_count == want.null_count
    # a null row (a miss, or a null input) has no values: the offsets do not grow across it
    off = np.frombuffer(got.buffers()[1], dtype=np.int32 if got.type in (pa.string(), pa.binary()) or
                        pa.types.is_list(got.type) else np.int64)[got.offset: got.offset + len(got) + 1]
    if len(got):
        assert (np.diff(off)[~np.asarray(got.is_valid())] == 0).all()


@SETTINGS
@given(data=st.data(), value=st.text(max_size=4))
def test_kernel_fill_equals_pyarrow_fill_null(data, value):
    values = data.draw(arrow_columns(kinds=[pa.string(), pa.large_string()]))
    got = fill_null_strings(values, value)
    got.validate(full=True)
    want = pc.fill_null(values, value)
    want = want.combine_chunks() if isinstance(want, pa.ChunkedArray) else want
    assert got.null_count == 0 and got.type == values.type and got.equals(want)


def test_clean_fill_equals_pandas_fillna():
    col = pd.Series(pd.array([None if i % 7 == 0 else f"v{i % 13}" for i in range(10_000)], dtype="str"), name="s")
    out = pd.DataFrame({"s": col}).fbx.clean(fill={"s": "unk"})
    pd.testing.assert_series_equal(out["s"], col.fillna("unk"))


@pytest.mark.parametrize("large_buffer", [0, 1 << 40])
def test_kernel_take_from_either_allocator(monkeypatch, large_buffer):
    """Every output buffer from the retained blocks (0), or from pyarrow's pool: the same values."""
    monkeypatch.setattr(host_memory, "LARGE_BYTES", large_buffer)
    values = pa.array([[1, 2], None, [], [3, 4, 5]] * 50, pa.list_(pa.int64()))
    rows = np.array([3, 0, -1, 2, 1, 199, 198], dtype=np.int64)
    assert take_var_width(values, rows).equals(_pyarrow_take(values, rows))
    strings = pa.array(["ab", None, "", "xyz"] * 50, pa.large_string())
    assert take_var_width(strings, rows).equals(_pyarrow_take(strings, rows))


def test_kernel_take_over_many_threads_equals_pyarrow_take():
    """Enough rows (an odd count) for the kernels' OpenMP blocks: offsets summed across threads, each
    thread's validity bytes its own."""
    rng = np.random.default_rng(11)
    n = 70_001
    lens = rng.integers(0, 5, n)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    valid = rng.random(n) > 0.1
    lists = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(-2**62, 2**62, int(offsets[-1]))),
                                     mask=pa.array(~valid)).slice(1)
    strings = pa.array([None if i % 9 == 0 else "s" * (i % 4) for i in range(n)], pa.large_string()).slice(3)
    for rows in (rng.integers(-1, n - 3, 90_001), np.flatnonzero(rng.random(n - 3) < 0.98)):
        for values in (lists, strings):
            got = take_var_width(values, rows)
            got.validate(full=True)
            assert got.equals(_pyarrow_take(values, rows))
    assert fill_null_strings(strings, "x").equals(pc.fill_null(strings, "x"))


def test_kernel_declines_what_it_cannot_take():
    with_child_nulls = pa.array([[1, None], [2]], pa.list_(pa.int64()))
    assert take_var_width(with_child_nulls, np.array([1, 0])) is None
    assert take_var_width(pa.array([[["x"]]], pa.list_(pa.list_(pa.string()))), np.array([0])) is None
    assert take_var_width(pa.array([1, 2]), np.array([0])) is None
    assert take_var_width(pa.array(["a"]), np.array([1])) is None  # out of bounds: the caller's take raises
    with pytest.raises(IndexError):
        take_array(pd.array(["a"], dtype="str"), np.array([1]))


@st.composite
def frames(draw):
    """A frame of Arrow list / string columns, a numpy int column and a nullable Int64 one, on an index
    with its own labels, with attrs."""
    n = draw(st.integers(0, 30))
    lists = draw(_lists(n))
    frame = pd.DataFrame({
        "tok": pd.array(lists, dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
        "s": pd.array(draw(_strings(n)), dtype="str"),
        "i": np.arange(n, dtype=np.int64) * 7,
        "m": pd.array([None if v is None else len(v) for v in lists], dtype="Int64"),
        "ls": pd.array(draw(_strings(n)), dtype=pd.ArrowDtype(pa.large_string())),
    }, index=pd.Index(np.arange(n, dtype=np.int64) * 3 + 100, name="row"))
    if draw(st.booleans()) and n:
        frame = frame.iloc[draw(st.integers(0, n - 1)):]  # the columns are slices of their arrays
    frame.attrs["origin"] = {"test": 1}
    return frame


def _same_frame(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.dtypes) == list(want.dtypes)
    assert type(got.index) is type(want.index) and got.index.equals(want.index)
    assert got.attrs == want.attrs


@SETTINGS
@given(data=st.data())
def test_take_rows_equals_pandas_take(data):
    frame = data.draw(frames())
    rows = data.draw(row_maps(len(frame), misses=False))
    _same_frame(take_rows(frame, rows), frame.take(rows))


@SETTINGS
@given(data=st.data())
def test_filter_rows_equals_pandas_boolean_selection(data):
    frame = data.draw(frames())
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(frame), max_size=len(frame))), dtype=bool)
    _same_frame(filter_rows(frame, keep), frame[keep])
    _same_frame(filter_rows(frame, pd.Series(keep, index=frame.index)), frame[pd.Series(keep, index=frame.index)])


def test_filter_rows_keeping_every_row_copies_nothing_and_stays_apart():
    """Every row kept: the frame's own buffers, not a copy; a change to either leaves the other as it was."""
    frame = pd.DataFrame({"a": np.arange(5), "s": pd.array(list("abcde"), dtype="str")})
    got = filter_rows(frame, np.ones(5, dtype=bool))
    _same_frame(got, frame[np.ones(5, dtype=bool)])
    assert np.shares_memory(got["a"].to_numpy(), frame["a"].to_numpy())
    got.loc[0, "a"] = 99
    got["new"] = 1
    assert frame["a"].tolist() == [0, 1, 2, 3, 4] and "new" not in frame.columns
    frame.loc[1, "a"] = -1
    assert got["a"].tolist() == [99, 1, 2, 3, 4]


@SETTINGS
@given(data=st.data())
def test_take_array_with_misses_equals_pandas_take_with_fill(data):
    frame = data.draw(frames())
    rows = data.draw(row_maps(len(frame), misses=True))
    for col in ("tok", "s", "ls"):
        got, want = take_array(frame[col].array, rows, fill=True), frame[col].array.take(rows, allow_fill=True)
        pd.testing.assert_extension_array_equal(got, want)


@st.composite
def join_sides(draw):
    """A left frame (keys with nulls and misses) and a right frame with unique keys and list / string payloads."""
    left = draw(frames())
    n = len(left)
    left = left.assign(k=pd.array(draw(st.lists(st.one_of(st.none(), st.integers(0, 12)), min_size=n, max_size=n)),
                                  dtype="Int64"))
    keys = draw(st.lists(st.integers(0, 12), unique=True, max_size=10))
    m = len(keys)
    right = pd.DataFrame({
        "k": pd.array(keys, dtype="Int64"),
        "rtok": pd.array(draw(_lists(m)), dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
        "rs": pd.array(draw(_strings(m)), dtype="str"),
        "rf": np.arange(m, dtype=np.float32) / 2,
    })
    return left, right


def _merge_reference(left: pd.DataFrame, right: pd.DataFrame, how: str) -> pd.DataFrame:
    """pandas' merge; left index kept; null keys never match (SQL), so right rows with a null key are
    never there to match; a left join's missing float payload is a null."""
    names = list(left.index.names)
    ref = left.reset_index().merge(right, on="k", how=how, sort=False, validate="many_to_one")
    ref = ref.set_index(names)
    return ref


@SETTINGS
@given(data=st.data(), how=st.sampled_from(["inner", "left"]))
def test_join_equals_pandas_merge(data, how):
    left, right = data.draw(join_sides())
    got = join_frames(left, right, ["k"], how)
    want = _merge_reference(left, right, how)
    assert list(got.columns) == list(want.columns)
    assert got.index.equals(want.index)
    for col in left.columns:
        pd.testing.assert_series_equal(got[col], want[col], check_index_type=False)
    for col in ("rtok", "rs"):
        pd.testing.assert_series_equal(got[col], want[col], check_index_type=False)
    assert got["rf"].astype("float64").fillna(-1).tolist() == want["rf"].astype("float64").fillna(-1).tolist()
    assert got["rf"].isna().tolist() == want["rf"].isna().tolist()


def test_inner_join_with_duplicate_right_keys_equals_pandas_merge():
    rng = np.random.default_rng(3)
    left = pd.DataFrame({"k": rng.integers(0, 6, 40),
                         "tok": pd.array([list(range(i % 4)) for i in range(40)], dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
    right = pd.DataFrame({"k": [1, 1, 2, 5, 5, 5], "s": pd.array(["a", None, "bc", "", "d", "e"], dtype="str")})
    got = join_frames(left, right, ["k"], "inner")
    want = left.reset_index().merge(right, on="k", how="inner").set_index("index")
    want.index.name = None
    # pandas orders each left row's matches as the right frame has them; so does the join
    pd.testing.assert_frame_equal(got, want, check_index_type=False)


def test_workload_where_and_joins_match_pandas_on_large_frames(monkeypatch):
    """At the size the kernels run by default (threshold as shipped), clean's filter and both joins equal
    pandas' boolean selection and merge."""
    monkeypatch.setattr(frame_rows, "MIN_ROWS", 4096)
    rng = np.random.default_rng(7)
    n = 20_000
    tok = [list(rng.integers(0, 2**40, rng.integers(0, 6))) for _ in range(n)]
    frame = pd.DataFrame({
        "instance_id": np.arange(n, dtype=np.int64),
        "slot": rng.integers(-1, 3, n).astype(np.int8),
        "tok": pd.array(tok, dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
        "q": pd.array([None if i % 11 == 0 else "q" * (i % 5) for i in range(n)], dtype="str"),
    })
    cleaned = frame.fbx.clean(where="slot >= 0")
    pd.testing.assert_frame_equal(cleaned, frame[frame["slot"] >= 0])
    basic = pd.DataFrame({"instance_id": np.flatnonzero(rng.random(n) < 0.97).astype(np.int64)})
    basic["d0"] = basic["instance_id"].astype(np.float32) / 3
    merged = cleaned.fbx.join(basic, on="instance_id", how="inner")
    want = cleaned.reset_index().merge(basic, on="instance_id", how="inner").set_index("index")
    want.index.name = None
    pd.testing.assert_frame_equal(merged, want, check_index_type=False)
