import dask.dataframe as dd
import pandas as pd
import pytest

import fbrapids
from fbrapids.accessors import FbxAccessor


def test_fbx_is_registered_on_pandas_and_dask_frames():
    frame = pd.DataFrame({"a": [1]})
    assert isinstance(frame.fbx, FbxAccessor)
    assert isinstance(dd.from_pandas(frame, npartitions=1).fbx, FbxAccessor)


# the dask half's second partition has no document with d.os: clean warns per partition computed (its
# docstring), a NoMatchWarning that is not this test's point
@pytest.mark.filterwarnings("ignore::fbrapids.errors.NoMatchWarning")
def test_method_chain_clean_join_join_on_pandas_and_dask():
    views = pd.DataFrame({"u": [1, 2, 3, 4], "a": [10, 20, 10, 30], "slot": [0, 1, -1, 2],
                          "ctx": ['{"d": {"os": "ios"}}', "{oops", None, '{"d": {}}']})
    users = pd.DataFrame({"u": [1, 2, 4], "age": pd.array([20, None, 40], dtype="Int32")})
    ads = pd.DataFrame({"a": [10, 20], "title": ["x y", None]})

    def chain(v, u, a):
        return (v.fbx.clean(where="slot >= 0", json={"ctx": {"os": "d.os"}}, fill={"os": ""})
                 .fbx.join(u.fbx.clean(fill={"age": -1}), on="u")
                 .fbx.join(a.fbx.clean(fill={"title": ""}), on="a")
                 .fbx.clean(fill={"age": -1, "title": ""}))

    eager = chain(views, users, ads)
    assert eager[["u", "os", "age", "title"]].values.tolist() == [[1, "ios", 20, "x y"], [2, "", -1, ""], [4, "", 40, ""]]
    lazy = chain(dd.from_pandas(views, npartitions=2), dd.from_pandas(users, npartitions=1), ads).compute()
    pd.testing.assert_frame_equal(lazy.sort_values("u").reset_index(drop=True), eager.reset_index(drop=True),
                                  check_dtype=False)


def test_public_names_resolve():
    assert callable(fbrapids.read_view)
    assert fbrapids.get_backend("cpu").name == "cpu"
