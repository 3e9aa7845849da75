"""The one expression JSON format (fbrapids/kernels/expr_json.py), shared by fitted states and
serving exports: a round trip of every value kind, a fitted state written in the format of
before (``{"op": ...}`` calls, ``{"array": ...}`` arrays) still loads, and a value that would
build anything but data is refused, naming where it was."""

import json

import numpy as np
import pandas as pd
import pytest

from fbrapids import ops
from fbrapids.errors import FeatureError, UnsafeFileError
from fbrapids.features import Fitted, fit
from fbrapids.kernels import Call, Col
from fbrapids.kernels.expr_json import expr_from_json, expr_to_json


def test_every_value_kind_round_trips_through_plain_json():
    e = Call("op_x", (Col("a"), ops.hash_bucket("b", 7)),
             (("bounds", (1.5, 2.5)), ("table", np.arange(6, dtype=np.int32).reshape(2, 3)), ("s", np.float32(0.25)),
              ("m", {"k": 1}), ("l", [1, "x", None]), ("v", ops.lookup("c", ["p", "q"]).param_dict()["vocab"])))
    back = expr_from_json(json.loads(json.dumps(expr_to_json(e))))
    assert back.op == "op_x" and back.args == e.args
    got, want = back.param_dict(), e.param_dict()
    assert got["bounds"] == (1.5, 2.5) and got["m"] == {"k": 1} and got["l"] == [1, "x", None]
    assert got["table"].dtype == np.int32 and got["table"].tolist() == want["table"].tolist()
    assert type(got["s"]) is np.float32 and got["s"] == np.float32(0.25)
    assert got["v"].key == want["v"].key and got["v"].mapping() == {"p": 1, "q": 2}


def test_a_fitted_state_saved_in_the_old_format_still_loads(tmp_path):
    f = fit(pd.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 5.0, 9.0]}),
            {"cid": ops.categorify("c"), "xb": ops.bucketize("x", [2, 6])})
    f.save(tmp_path)
    doc_path = next(p for p in tmp_path.iterdir() if p.suffix == ".json")
    doc = json.loads(doc_path.read_text())
    assert doc["features"]["xb"]["call"] == "bucketize"  # written in the shared format
    # the same features as the fitted JSON of before wrote them (hand-written here)
    doc["features"] = {"cid": {"op": "categorify", "args": [{"col": "c"}], "params": [["min_freq", 1]]},
                       "xb": {"op": "bucketize", "args": [{"col": "x"}],
                              "params": [["boundaries", {"array": [2, 6], "dtype": "int64"}]]}}
    doc_path.write_text(json.dumps(doc))
    old = Fitted.load(tmp_path)
    assert old.features["cid"].op == "categorify" and old.features["cid"].param_dict()["min_freq"] == 1
    assert old.features["xb"].param_dict()["boundaries"].tolist() == [2, 6]
    doc["features"]["xb"]["params"][0][1] = {"array": [2, 6], "dtype": "object"}
    doc_path.write_text(json.dumps(doc))
    with pytest.raises(UnsafeFileError, match="feature 'xb'.*'object' is not a plain dtype"):
        Fitted.load(tmp_path)


@pytest.mark.parametrize("doc, why", [
    ({"call": "hash_bucket", "args": [{"col": "u"}], "params": [["n", {"ndarray": {"dtype": "O", "shape": [1],
                                                                                  "base64": ""}}]]}, "not a numeric"),
    ({"call": "hash_bucket", "args": [7], "params": []}, "arguments must be expressions"),
    ({"col": "u", "extra": 1}, "unrecognised value"),
    ({"eval": "__import__('os')"}, "unknown tag 'eval'"),
    ({"tuple": [1]}, "not an expression"),
])
def test_anything_but_data_is_refused_naming_where(doc, why):
    with pytest.raises(UnsafeFileError, match=f"^served feature 'f'.*{why}"):
        expr_from_json(doc, "served feature 'f'")


def test_a_value_json_cannot_hold_is_the_callers_error():
    with pytest.raises(FeatureError, match="feature 'o' parameter 'p': a value of type object"):
        expr_to_json(Call("x", (Col("a"),), (("p", object()),)), "feature 'o'", FeatureError)
