"""``model="logreg"`` against a plain sklearn ``LogisticRegression`` on the same hashed features.

Both read the pipeline's features of the default data (``plan_frames``: the workload's
sparse ids and dense columns, training days vs the held-out last day).  sklearn's side is
written from its docs: each id becomes the string ``"feature=id"``, hashed by
``FeatureHasher`` (2^20 columns, no alternating sign), the dense columns appended, then
``LogisticRegression(solver="liblinear")`` (L2, C=1) fitted to convergence.  fbrapids' side is
``run_pipeline(model="logreg")``: one epoch, online.  Prints the held-out AUCs and ends with
one JSON line.

This is the small-data reference of ``tests/app/test_trial_method.py``; it is not the
peer of a README figure.  Untuned (C=1, dense columns unscaled), it is a weak LR at 200k rows
(held-out AUC 0.626 where a scaled, C=0.1 one reaches 0.678): the README's logreg-vs-LR
figure is ``benchmarks/models.py``'s, whose sklearn reference scales the dense columns and
runs over several seeds beside ``model="logreg"`` and the deep models.

    nice -n 10 python benchmarks/logreg_vs_sklearn.py [--rows 200000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def hashed_matrix(frame: Any, sparse: list[str], dense: list[str], hasher: Any) -> Any:
    """The pipeline's features as sklearn's docs hash them: one ``"feature=id"`` string per id
    (``FeatureHasher(input_type="string")``), the dense columns appended (CSR)."""
    import scipy.sparse as sps

    cols = {f: frame[f].tolist() for f in sparse}
    rows = [[f"{f}={v}" for f in sparse for v in (cols[f][i] if hasattr(cols[f][i], "__len__") else [cols[f][i]])]
            for i in range(len(frame))]
    return sps.hstack([hasher.transform(rows), sps.csr_matrix(frame[dense].to_numpy(np.float64))]).tocsr()


def sklearn_auc(data_dir: str | Path, n_features: int = 1 << 20) -> float:
    """Held-out AUC of sklearn's LogisticRegression (liblinear, L2, C=1) on the hashed features."""
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from fbrapids.app.pipeline import DENSE, LABEL, SPARSE, plan_frames, training_inputs

    frames = plan_frames(training_inputs(data_dir, "logreg", 16, 2048, 0), data_dir, "cpu")
    tr, te = frames.train.compute(), frames.test.compute()
    hasher = FeatureHasher(n_features=n_features, input_type="string", alternate_sign=False)
    clf = LogisticRegression(solver="liblinear").fit(hashed_matrix(tr, SPARSE, DENSE, hasher), tr[LABEL])
    return float(roc_auc_score(te[LABEL], clf.predict_proba(hashed_matrix(te, SPARSE, DENSE, hasher))[:, 1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "logreg.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    sys.path.insert(0, str(ROOT))
    from benchmarks.machine import machine_description, write_result
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.datasets.synthetic.generate import ensure_dataset

    machine = machine_description()
    with tempfile.TemporaryDirectory(prefix="fbrapids-logreg-") as tmp:
        data = ensure_dataset(args.rows, Path(tmp) / "data")
        t = time.perf_counter()
        ref = sklearn_auc(data)
        sk_s = time.perf_counter() - t
        t = time.perf_counter()
        ours = run_pipeline(data, model="logreg", checkpoint=False, count_clean=False, progress=False)
        ours_s = time.perf_counter() - t
    res = {"rows": args.rows, "auc_fbrapids_logreg": ours.metrics["auc"], "auc_sklearn": ref,
           "difference": ours.metrics["auc"] - ref, "seconds_fbrapids": round(ours_s, 1),
           "seconds_sklearn": round(sk_s, 1), "machine": machine,
           "command": " ".join(["python benchmarks/logreg_vs_sklearn.py", *(sys.argv[1:] if argv is None else argv)]),
           "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    write_result(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
