"""Shared by the trainer tests: a deterministic CTR frame, a small model, weight snapshots.

Also a child-process entry point (``python tests/_trainer_helpers.py MODE ROOT ...``) for
the kill / crash tests:

* ``train-then-hang ROOT SSD N``: train N steps with a checkpoint at N, print ``CHECKPOINTED``,
  then keep training until killed.
* ``crash-in-checkpoint ROOT SSD N``: train N steps (checkpoint at N), then start a second
  checkpoint and SIGKILL itself after its first file is written.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import fbrapids  # noqa: E402,F401
from fbrapids.trainers import DLRM, StoreConfig, fit, save_checkpoint  # noqa: E402

LIST = pd.ArrowDtype(pa.list_(pa.int64()))


def ctr_frame(rows: int = 1536, seed: int = 0, n_ads: int = 3000, n_users: int = 800) -> pd.DataFrame:
    """Clicks that depend on the ad id and a dense feature; ids spread over 64 bits."""
    rng = np.random.default_rng(seed)
    ad = rng.zipf(1.3, rows) % n_ads
    user = rng.integers(0, n_users, rows)
    d0 = rng.normal(size=rows)
    logit = np.where(ad % 3 == 0, 1.5, -1.5) + 0.5 * d0
    click = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int8)
    spread = np.uint64(0x9E3779B97F4A7C15)
    ad_raw = (ad.astype(np.uint64) * spread)  # many ids above 2**63
    lens = rng.integers(0, 4, rows)
    toks = [list((rng.integers(0, 50, k) * 7919 - 100).astype(np.int64)) for k in lens]  # negative ids too
    return pd.DataFrame({
        "click": click, "d0": d0, "d1": rng.random(rows).astype(np.float32),
        "ad": pd.Series(ad_raw, dtype="uint64"), "user": user.astype(np.int64),
        "toks": pd.Series(toks, dtype=LIST),
    })


FEATURES = ["ad", "user", "toks"]


def small_model(store: StoreConfig, seed: int = 0) -> DLRM:
    torch.manual_seed(seed)
    return DLRM(2, FEATURES, embedding_dim=8, bottom_mlp=[16], top_mlp=[16], store=store)


def tiered(ssd: str | os.PathLike) -> StoreConfig:
    return StoreConfig(cache_rows=128, host_rows=256, ssd_dir=str(ssd), lr=0.05)


def batches(df: pd.DataFrame, batch_size: int = 32):
    return df.fbx.stream(label="click", dense=["d0", "d1"], sparse=FEATURES, batch_size=batch_size,
                         shuffle_buffer=256, seed=7, group="user")


def snapshot(model: DLRM) -> dict[str, np.ndarray]:
    """Every dense tensor and every table's (id-sorted) rows incl. optimizer state."""
    out = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
    for key, store in model.stores().items():
        ids, rows = store.state()
        order = np.argsort(ids)
        out[f"{key}/ids"] = ids[order]
        out[f"{key}/rows"] = rows[order]
    return out


def same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> list[str]:
    """Names of entries that differ in any bit (or exist on one side only)."""
    bad = sorted(set(a) ^ set(b))
    for k in set(a) & set(b):
        if a[k].shape != b[k].shape or a[k].tobytes() != b[k].tobytes():
            bad.append(k)
    return bad


def _main() -> None:
    mode, root, ssd, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    torch.set_num_threads(1)  # as the parent test: the same reduction order, bit for bit
    df = ctr_frame()
    model = small_model(tiered(ssd))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    fit(model, batches(df), optimizer=opt, max_steps=n, checkpoint_dir=root, checkpoint_every=n, progress=False)
    if mode == "train-then-hang":
        print("CHECKPOINTED", flush=True)
        while True:  # keep training (no checkpoints) until killed
            fit(model, batches(df), optimizer=opt, max_steps=10**9, progress=False, prefetch_rows=True)
            time.sleep(0.01)
    elif mode == "crash-in-checkpoint":
        def die(path: Path) -> None:
            print(f"WROTE {path}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        save_checkpoint(model, opt, root, step=n + 1, on_file=die)
        print("UNREACHABLE", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    _main()
