"""DIN vs DICM (four behaviour-image aggregators) on the Taobao tiny sample, side by side.

Reads ``shared/data/taobao_tiny_train.csv`` / ``_test.csv`` (100 rows each) with
:func:`fbrapids.ams.read_taobao`, trains DIN and DICM with each aggregator (``sum``,
``max``, ``attentive``, ``multi_query``) for ``--epochs`` epochs from the same seed, and
evaluates AUC, GAUC and logloss on the test file, plus the image traffic of the DICM runs
(references vs unique images per batch, raw-vector vs embedding bytes).

**The image vectors are synthetic**: one deterministic vector per item id
(:func:`fbrapids.ams.vectors.synthetic_vectors`), since the public sample has no images.
They carry no visual signal, so DICM is not expected to beat DIN here; the run shows the
machinery working on real ids and sequences.  With 100 test rows (3 users with both
classes) the metrics are noisy: read them as a smoke figure, not a result.

The last line printed is one JSON object: ``{"benchmark": "dicm_taobao", "synthetic_images":
true, "image_dim": D, "runs": {name: {"auc", "gauc", "logloss", "train_loss_first",
"train_loss_last"}}, "images": {...DICM multi_query ImageBatchReport totals...}}``.

Usage:
    python benchmarks/dicm_taobao.py [--data ../shared/data] [--epochs 5] [--image-dim 256]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fbrapids.ams import DICM, ImageEmbedder, ImageEmbeddingMLP, read_taobao, taobao_image_store  # noqa: E402
from fbrapids.ams.taobao import ID_COLUMNS  # noqa: E402
from fbrapids.trainers import DIN, StoreConfig, evaluate, fit  # noqa: E402

SPARSE = [f"{c}_h" for c in ID_COLUMNS]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--image-dim", type=int, default=256, help="raw vector width (the paper: 4096)")
    ap.add_argument("--batch-size", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    train = read_taobao(args.data / "taobao_tiny_train.csv")
    test = read_taobao(args.data / "taobao_tiny_test.csv")
    store = taobao_image_store([train, test], dim=args.image_dim, seed=args.seed)

    def batches(df, images: bool):
        extra = ["hist_img", "ad_img"] if images else []
        return df.fbx.stream(label="clk", dense=["log_price"], sparse=[*SPARSE, "hist_h", *extra], group="userid",
                             batch_size=args.batch_size)

    runs, images = {}, {}
    cfg = StoreConfig(cache_rows=4096)
    for name in ("din", "dicm_sum", "dicm_max", "dicm_attentive", "dicm_multi_query"):
        torch.manual_seed(args.seed)
        if name == "din":
            model = DIN(1, SPARSE, {"hist_h": "adgroup_id_h"}, embedding_dim=8, mlp=[64, 32], store=cfg)
        else:
            emb = ImageEmbedder(store, ImageEmbeddingMLP([args.image_dim, 64, 32, 12]))
            model = DICM(1, SPARSE, emb, behaviour_images="hist_img", ad_image="ad_img",
                         ad_id_features=["adgroup_id_h", "cate_id_h", "brand_h"], behaviour_ids="hist_h",
                         tables={"hist_h": "adgroup_id_h"}, aggregator=name.removeprefix("dicm_"), embedding_dim=8,
                         mlp=[64, 32], store=cfg)
        res = fit(model, batches(train, name != "din"), epochs=args.epochs, progress=False)
        m = evaluate(model, batches(test, name != "din"), progress=False)
        k = max(1, len(res.losses) // args.epochs)
        runs[name] = {"auc": round(m["auc"], 4), "gauc": round(m["gauc"], 4), "logloss": round(m["logloss"], 4),
                      "train_loss_first": round(float(np.mean(res.losses[:k])), 4),
                      "train_loss_last": round(float(np.mean(res.losses[-k:])), 4)}
        if name == "dicm_multi_query":
            images = {k2: (round(v, 3) if isinstance(v, float) else v) for k2, v in emb.totals.as_dict().items()}
        print(f"{name:>18}: test AUC {runs[name]['auc']:.4f}  GAUC {runs[name]['gauc']:.4f}  logloss "
              f"{runs[name]['logloss']:.4f}  (train loss {runs[name]['train_loss_first']:.3f} -> "
              f"{runs[name]['train_loss_last']:.3f})")
    print(f"images (DICM multi_query, all batches, synthetic vectors): {images['references']} references, "
          f"{images['unique_images']} unique embedded ({images['dedup_ratio']:.2f} refs per image); raw bytes "
          f"{images['raw_bytes']} vs embedding bytes {images['embedding_bytes']} (x{images['communication_saving']})")
    print(json.dumps({"benchmark": "dicm_taobao", "synthetic_images": True, "image_dim": args.image_dim,
                      "epochs": args.epochs, "runs": runs, "images": images}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
