"""The Taobao display-ad sample as DIN / DICM input, with synthetic image vectors.

The sample (``shared/data/taobao_tiny_*.csv``, see its DATA.md) comes joined: a log row
with user and ad attributes, and ``click_sequence``, the ``^``-separated item ids the user
clicked before.  :func:`read_taobao` reads it and extracts, through the meta-kernel path
(``df.fbx.extract``):

* ``<column>_h``: hash buckets (FarmHash Fingerprint64 of the decimal text) of the id and
  categorical columns; float columns with nulls become ``-1`` first;
* ``hist_h``: the click sequence's item ids hashed the same way, so an item clicked and the
  same item shown as an ad (``adgroup_id_h``) share an embedding row;
* ``hist_img`` (``list<int64>``) and ``ad_img`` (int64): the raw item ids, used as image ids;
* ``log_price``: ``log1p(price)``, the one dense feature.

**The image vectors are synthetic.**  The public sample carries no images, so
:func:`taobao_image_store` makes one deterministic vector per item id
(:func:`fbrapids.ams.vectors.synthetic_vectors`, a hash of ``(seed, id)``).  They exercise
the AMS machinery (storage once per id, dedup, gradients, traffic) but carry no visual signal.

Example:
    >>> from pathlib import Path
    >>> p = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "taobao_tiny_train.csv"
    >>> df = read_taobao(p) if p.exists() else None
    >>> df is None or (len(df), str(df["hist_img"].dtype)) == (100, "list<item: int64>[pyarrow]")
    True
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fbrapids.ams.vectors import ImageVectorStore
from fbrapids.errors import ViewError

if TYPE_CHECKING:  # (annotations only: fbrapids.ops is imported where the features are built)
    from fbrapids.kernels import Expr
    from fbrapids.ops import ExprLike

ID_COLUMNS = ("userid", "adgroup_id", "cate_id", "campaign_id", "customer", "brand", "pid", "cms_segid",
              "cms_group_id", "final_gender_code", "age_level", "pvalue_level", "shopping_level", "occupation",
              "new_user_class_level")
LIST = pd.ArrowDtype(pa.list_(pa.int64()))


def taobao_features(frame: pd.DataFrame, buckets: int = 1 << 20) -> dict[str, Expr]:
    """The feature expressions :func:`read_taobao` extracts (see the module docstring)."""
    from fbrapids import ops

    feats: dict[str, Expr] = {}
    for c in ID_COLUMNS:
        x: ExprLike = c
        if pd.api.types.is_float_dtype(frame[c].dtype):
            x = ops.cast(ops.fill_null(c, -1.0), "i64")
        elif frame[c].hasnans:
            x = ops.fill_null(c, "" if not pd.api.types.is_numeric_dtype(frame[c].dtype) else -1)
        feats[f"{c}_h"] = ops.hash_bucket(x, buckets)
    seq = ops.fill_null("click_sequence", "")
    feats["hist_h"] = ops.split(seq, "^", buckets=buckets)
    feats["hist_tokens"] = ops.split(seq, "^")
    feats["log_price"] = ops.log1p(ops.fill_null("price", 0.0))
    return feats


def read_taobao(path: str | os.PathLike, buckets: int = 1 << 20) -> pd.DataFrame:
    """The sample at ``path`` with the extracted feature columns (module docstring).

    Raises ``ValueError`` naming the file and row when a click-sequence item is not an integer.
    """
    df = pd.read_csv(path)
    missing = [c for c in (*ID_COLUMNS, "clk", "price", "click_sequence") if c not in df.columns]
    if missing:
        raise ViewError(f"{path}: columns {missing} missing from the Taobao sample")
    df["click_sequence"] = df["click_sequence"].astype("str")
    out = df.fbx.extract(**taobao_features(df, buckets))
    toks = pa.array(out["hist_tokens"].array.__arrow_array__())
    if isinstance(toks, pa.ChunkedArray):
        toks = toks.combine_chunks()
    flat = pc.list_flatten(toks)
    try:
        ints = pc.cast(flat, pa.int64())
    except pa.ArrowInvalid as exc:
        bad = np.flatnonzero(~pc.utf8_is_digit(flat).to_numpy(zero_copy_only=False))[0]
        owner = np.repeat(np.arange(len(out)), pc.list_value_length(toks).to_numpy(zero_copy_only=False))[bad]
        raise ViewError(f"{path}: click_sequence item {flat[bad]} in row {owner} is not an integer id") from exc
    hist = pa.ListArray.from_arrays(pa.array(toks.offsets), ints)
    out["hist_img"] = pd.Series(pd.arrays.ArrowExtensionArray(hist), index=out.index, dtype=LIST)
    out["ad_img"] = out["adgroup_id"].astype("int64")
    return out.drop(columns=["hist_tokens"])


def taobao_image_store(frames: list[pd.DataFrame], dim: int, seed: int = 0,
                       path: str | os.PathLike | None = None) -> ImageVectorStore:
    """Synthetic vectors (one per item id seen as an ad or in a click sequence of ``frames``)."""
    ids = [f["ad_img"].to_numpy(np.int64) for f in frames]
    for f in frames:
        arr = f["hist_img"].array.__arrow_array__()
        ids.append(pc.list_flatten(arr).to_numpy(zero_copy_only=False).astype(np.int64))
    return ImageVectorStore.from_ids(np.concatenate(ids), dim=dim, seed=seed, path=path)
