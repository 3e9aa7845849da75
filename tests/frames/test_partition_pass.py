import dask.dataframe as dd
import pandas as pd
import pytest

from fbrapids.errors import ArgumentError
from fbrapids.frames.partition_pass import iter_partitions


def test_a_pass_gives_each_partition_as_dask_computes_it():
    frame = pd.DataFrame({"k": [3, 1, 2, 3, 1, 2, 5], "v": range(7)})
    lazy = dd.from_pandas(frame, npartitions=3).shuffle(on="k", npartitions=2)  # partitions sharing upstream tasks
    stats: dict[str, int] = {}
    got = list(iter_partitions(lazy, window=1, stats=stats))
    assert stats["partitions"] == lazy.npartitions == len(got)
    for i, part in enumerate(got):  # (a shuffle's row order inside a partition differs from one compute to another)
        pd.testing.assert_frame_equal(part.sort_index(), lazy.get_partition(i).compute().sort_index())


def test_an_eager_frame_is_refused_naming_its_type():
    with pytest.raises(ArgumentError, match="needs a dask frame, got DataFrame"):
        next(iter_partitions(pd.DataFrame({"a": [1]})))
