"""The stream's shuffle buffer (fbrapids.trainers.shuffle) and the row gather it emits with
(fbrapids.trainers.row_gather), against references written with pandas and numpy alone: the
buffer that joins the rows it holds and draws from the join, on hypothesis inputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from fbrapids.errors import ArgumentError
from fbrapids.trainers.batch import Columns
from fbrapids.trainers.row_gather import gather_columns, gather_ragged
from fbrapids.trainers.shuffle import ShuffleBuffer


def _run(start: int, n: int, seed: int, dense: int, single: bool = True) -> Columns:
    """``n`` rows numbered from ``start`` (label = number), two ragged columns of 0-4 ids and
    one of one id a row (``single``: marked so, as ``Columns.from_frame`` marks a scalar id column)."""
    rng = np.random.default_rng(seed)
    sparse = {}
    for name in ("a", "b", "s"):
        lengths = rng.integers(0, 5, n) if name != "s" else np.ones(n, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        sparse[name] = (rng.integers(-2**62, 2**62, int(offsets[-1])), offsets)
    return Columns(rng.random((n, dense), dtype=np.float32), np.arange(start, start + n, dtype=np.float32), sparse,
                   rng.integers(0, 1 << 40, n), single=frozenset({"s"}) if single else frozenset())


def _table(cols: list[Columns]) -> pd.DataFrame:
    """The rows as a pandas frame: one row a row, the ragged columns as Python lists."""
    frames = []
    for c in cols:
        f = pd.DataFrame({"label": c.label, "group": c.group, "dense": [tuple(r) for r in c.dense.tolist()]})
        for k, (v, o) in c.sparse.items():
            f[k] = [v[o[i]:o[i + 1]].tolist() for i in range(len(c))]
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _bytes(rows: pd.DataFrame, dense: int) -> int:
    """The bytes of one run of rows holding ``rows`` (float32 dense and labels, int64 groups, ids
    and offsets, one offset more than rows per ragged column)."""
    ids = sum(len(x) for k in ("a", "b", "s") for x in rows[k])
    return len(rows) * (4 * dense + 4 + 8) + 8 * ids + 3 * 8 * (len(rows) + 1)


def _reference(runs: list[Columns], capacity: int, batch: int, seed: int, max_bytes: int, unit: int,
               dense: int) -> list[pd.DataFrame]:
    """The buffer as the module docstring says, on a pandas frame of the rows it holds."""
    rng = np.random.default_rng(seed)
    stream = _table(runs)
    held, out, arrived = stream.iloc[:0], [], 0
    while len(stream) - arrived >= unit:
        held = pd.concat([held, stream.iloc[arrived:arrived + unit]], ignore_index=True)
        arrived += unit
        keep = min(capacity, int(arrived * 0.5))
        size = _bytes(held, dense)
        if size > max_bytes:
            keep = min(keep, int(len(held) * max_bytes / size))
        emit = (len(held) - keep) // batch * batch
        if emit > 0:
            order = rng.permutation(len(held))
            out.append(held.iloc[order[:emit]].reset_index(drop=True))
            held = held.iloc[np.sort(order[emit:])].reset_index(drop=True)
    rest = pd.concat([held, stream.iloc[arrived:]], ignore_index=True)
    if len(rest):
        out.append(rest.iloc[rng.permutation(len(rest))].reset_index(drop=True))
    return out


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=8), capacity=st.integers(1, 60),
       batch=st.integers(1, 9), seed=st.integers(0, 2**16), dense=st.integers(0, 3),
       max_bytes=st.one_of(st.just(1 << 30), st.integers(100, 8000)))
def test_buffer_emits_the_reference_chunks(sizes: list[int], capacity: int, batch: int, seed: int, dense: int,
                                           max_bytes: int) -> None:
    """Every chunk, row for row (labels, groups, dense rows, each ragged column's lists), as
    the reference's: the same draws, the byte bound (100 to 8,000 bytes: a few rows to all) included."""
    runs, start = [], 0
    for i, n in enumerate(sizes):
        runs.append(_run(start, n, seed + i, dense))
        start += n
    buf = ShuffleBuffer(capacity, batch, np.random.default_rng(seed), max_bytes=max_bytes)
    chunks = [c for r in runs for c in buf.add(r)] + buf.finish()
    want = _reference(runs, capacity, batch, seed, max_bytes, buf.unit, dense)
    got = [_table([c]) for c in chunks]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        pd.testing.assert_frame_equal(g, w)
    assert sorted(x for g in got for x in g["label"]) == list(range(sum(sizes)))
    assert buf.runs == [] and len(buf.held) == 0  # the pass is over: nothing is held


@pytest.mark.parametrize("capacity, sizes", [(4, [8] * 200), (64, [8] * 200), (64, [3, 50, 1, 120, 7] * 40),
                                             (1000, [300] * 100)])
def test_buffer_holds_runs_in_proportion_to_the_rows_held(capacity: int, sizes: list[int]) -> None:
    """A row held long does not keep its whole run alive: the runs the buffer keeps hold at most
    twice the rows held, plus two units and the newest run (rows still pending), after every
    run; and the chunks are still the reference's."""
    buf, start, runs, chunks = ShuffleBuffer(capacity, 2, np.random.default_rng(5)), 0, [], []
    for i, n in enumerate(sizes):
        runs.append(_run(start, n, i, 1))
        start += n
        chunks += buf.add(runs[-1])
        kept = sum(len(r) for r in buf.runs)
        assert kept <= 2 * len(buf.held) + 2 * buf.unit + n, (i, kept, len(buf.held))
    chunks += buf.finish()
    want = _reference(runs, capacity, 2, 5, 1 << 30, buf.unit, 1)
    assert len(chunks) == len(want)
    for c, w in zip(chunks, want):
        pd.testing.assert_frame_equal(_table([c]), w)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=6), seed=st.integers(0, 2**16),
       picks=st.integers(0, 80), repeat=st.booleans(), cut=st.integers(0, 3))
def test_gather_equals_numpy_take_of_the_joined_parts(lengths: list[int], seed: int, picks: int, repeat: bool,
                                                      cut: int) -> None:
    """Row ``rows[i]`` of part ``parts[i]``: numpy's concatenate-then-take, for parts sliced
    from larger runs (offsets not from 0), empty bags and parts, rows picked once or repeated,
    a column of one id a row gathered as such (every part marked) or as lists (one part not)."""
    rng = np.random.default_rng(seed)
    parts = [_run(0, n + cut, seed + i, 2, single=i % 3 != 2 or not repeat).slice(cut, n + cut)
             for i, n in enumerate(lengths)]
    total = sum(lengths)
    if total == 0:
        pos = np.zeros(0, dtype=np.int64)
    elif repeat:
        pos = rng.integers(0, total, picks)
    else:
        pos = rng.permutation(total)[:picks]
    starts = np.cumsum([0, *lengths])
    which = np.searchsorted(starts, pos, side="right") - 1
    rows = pos - starts[which]
    got = Columns.gather(parts, which, rows)
    want = Columns.concat(parts).take(pos) if total else Columns.concat(parts).slice(0, 0)
    assert np.array_equal(got.dense, want.dense) and np.array_equal(got.label, want.label)
    assert np.array_equal(got.group, want.group)
    assert got.single == frozenset.intersection(*(p.single for p in parts))  # a part not marked: the lists' path
    for k in ("a", "b", "s"):
        (gv, go), (wv, wo) = got.sparse[k], want.sparse[k]
        assert np.array_equal(go, wo - wo[0]) and np.array_equal(gv, wv[wo[0]:wo[-1]]), k


def test_gather_refuses_what_is_not_in_the_parts() -> None:
    v, o = np.array([1, 2, 3]), np.array([0, 1, 3])
    with pytest.raises(ArgumentError, match="a row outside its part"):
        gather_ragged([[(v, o)]], np.array([0]), np.array([2]))
    with pytest.raises(ArgumentError, match="a part index outside"):
        gather_columns([[np.zeros(2)]], np.array([1]), np.array([0]))
    with pytest.raises(ArgumentError, match="offsets that do not fit"):
        gather_ragged([[(v, np.array([0, 1, 4]))]], np.array([0]), np.array([0]))


def test_from_frame_marks_scalar_id_columns_single() -> None:
    """``Columns.from_frame`` marks the scalar id columns (one id a row), not the list ones, and
    slices, takes and joins keep the mark."""
    import pyarrow as pa

    df = pd.DataFrame({"y": [0, 1, 0], "u": pd.Series([5, 6, 7], dtype="uint64"), "i": [1, 2, 3],
                       "l": pd.Series([[1], [2, 3], []], dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
    c = Columns.from_frame(df, label="y", dense=[], sparse=["u", "i", "l"])
    assert c.single == {"u", "i"}
    assert c.slice(1, 3).single == c.take(np.array([2, 0])).single == Columns.concat([c, c]).single == {"u", "i"}
    g = Columns.gather([c, c.slice(1, 3)], np.array([1, 0, 1]), np.array([1, 0, 0]))
    assert g.sparse["u"][0].tolist() == [7, 5, 6] and g.sparse["u"][1].tolist() == [0, 1, 2, 3]
    assert g.sparse["l"][0].tolist() == [1, 2, 3] and g.sparse["l"][1].tolist() == [0, 0, 1, 3]


def test_gather_of_rows_longer_than_the_parts_mean_counts_them_and_gathers_again() -> None:
    """The values' buffer is sized from the parts' mean bag length; rows drawn far longer than
    it (here the 100 bags of 100 ids among 10,000 empty ones) are counted and gathered again."""
    lengths = np.zeros(10_100, dtype=np.int64)
    lengths[::101] = 100
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = np.arange(int(offsets[-1]), dtype=np.int64)
    rows = np.flatnonzero(lengths)[::-1]
    [(v, o)] = gather_ragged([[(values, offsets)]], np.zeros(len(rows), dtype=np.int64), rows)
    assert o.tolist() == list(range(0, 100 * len(rows) + 1, 100))
    assert v.tolist() == [x for r in rows for x in range(offsets[r], offsets[r + 1])]
