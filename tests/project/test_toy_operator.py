"""An operator is added in one file (plus its C): the toy ``toy_mod`` of ``toy_operator.py``
(C in ``fbx_ops_toy.h``) runs through the plan, the host kernel (row and dictionary paths,
against numpy's ``%``), the CUDA source (compiled by NVRTC where it is installed), explain,
the disk budget's bounds, the plan drawing and serving, while nothing in the package names it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401  (registers the .fbx accessor)
from fbrapids.errors import OperatorError
from fbrapids.features.plan_graph import operator_kind
from fbrapids.kernels import build_plan, dictionary_mode, get_operator, render_module
from fbrapids.kernels.nvrtc import compile_cuda, nvrtc_available
from fbrapids.runs.disk_budget import expression_bound

from toy_operator import HEADER, TOY, toy_mod

PKG = Path(fbrapids.__file__).resolve().parent
M = 7


def _frame(n: int = 50_000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = pd.array(rng.integers(-(2**62), 2**62, n), dtype="Int64")
    x[rng.random(n) < 0.1] = pd.NA
    x[:4] = [-(2**63), 2**63 - 1, -1, 0]
    return pd.DataFrame({"x": x})


def _expected(x: pd.Series) -> list:
    """numpy's ``%`` (the sign of the divisor, as Python's), nulls kept."""
    values = np.mod(x.fillna(0).to_numpy(dtype=np.int64), np.int64(M))
    return [None if missing else int(v) for v, missing in zip(values, x.isna().to_numpy())]


def _values(s: pd.Series) -> list:
    return [None if pd.isna(v) else int(v) for v in s.tolist()]


def test_the_package_never_names_it() -> None:
    """Its properties are on its object, so no module of the package lists it."""
    named = [p for p in PKG.rglob("*") if p.suffix in (".py", ".h", ".c", ".cu") and "toy_mod" in p.read_text()]
    assert named == []
    assert get_operator("toy_mod") is TOY and Path(HEADER).is_file()


def test_plan_and_host_kernel_match_numpy() -> None:
    df = _frame()
    plan = build_plan({"t": toy_mod("x", M)}, {"x": "i64"})
    node = plan.nodes[plan.outputs["t"]]
    assert node.op is TOY and node.type == "i64" and node.dict_slot is not None
    want = _expected(df["x"])
    for how in ("off", "on"):  # the row path and the dictionary path (declared: a pure function)
        with dictionary_mode(how):
            assert _values(df.fbx.extract(t=toy_mod("x", M))["t"]) == want, how


def test_parameters_are_checked_when_built_and_when_planned() -> None:
    with pytest.raises(OperatorError, match="toy_mod: parameter 'm'"):
        toy_mod("x", 0)
    with pytest.raises(Exception, match="parameter 'm'"):  # built by name: refused when planned
        pd.DataFrame({"x": [1]}).fbx.extract(t=fbrapids.ops.call("toy_mod", "x", m=-2))


def test_cuda_source_names_it_and_compiles() -> None:
    plan = build_plan({"t": toy_mod("x", M), "h": fbrapids.ops.hash_bucket(toy_mod("x", M), 5)}, {"x": "i64"},
                      backend="gpu")
    src = render_module(plan, "cuda")
    assert "fbx_toy_mod(" in src and "fbx_ops_toy.h" in src
    if nvrtc_available():
        assert "fbx_layer_0" in compile_cuda(src, name="toy_mod.cu", arch="compute_90")


def test_explain_bounds_and_drawing_ask_the_object() -> None:
    text = _frame(10).fbx.explain(t=toy_mod("x", M))
    assert "toy_mod" in text
    bound = expression_bound(toy_mod("x", M))
    assert bound is not None and (bound.rows, bound.why) == (M, f"{M} residues")
    assert operator_kind(TOY) == "scalar"


def test_serving_scores_it_as_the_reference_column() -> None:
    """A scorer computing it from the item's ``x`` scores exactly as one fed numpy's values."""
    from fbrapids.serving import Scorer, ServingSpec
    from fbrapids.trainers import StoreConfig, WideAndDeep

    items = [{"ad_id": i, "x": x, "price": 1.0 + i} for i, x in enumerate([-9, 3, 10, 2**62 + 1, -(2**63)])]
    common = {"request_columns": ["user_id"], "item_key": "ad_id", "dense": ["price"], "sparse": ["u", "t"],
              "request_features": {"u": fbrapids.ops.hash_bucket("user_id", 100)}}
    schema = {"user_id": "int64", "ad_id": "int64", "x": "int64", "price": "float64"}
    toy = ServingSpec(schema=schema, item_columns=["ad_id", "x", "price"], item_features={"t": toy_mod("x", M)},
                      **common)
    reference = ServingSpec(schema={**schema, "t": "int64"}, item_columns=["ad_id", "t", "price"], **common)
    model = WideAndDeep(1, ["u", "t"], embedding_dim=4, deep_mlp=[8], store=StoreConfig(cache_rows=64))
    for name, table in model.stores().items():  # rows for the residues (an unseen id reads one default row)
        if name.endswith("/t"):
            table.lookup(np.arange(M, dtype=np.int64), requires_grad=False)
            table.end_step()
    got = Scorer(model, toy).score({"user_id": 3}, items)
    want = Scorer(model, reference).score({"user_id": 3}, [{**it, "t": int(it["x"]) % M} for it in items])
    assert got.shape == (5,) and np.array_equal(got, want) and len(np.unique(got)) == 5
