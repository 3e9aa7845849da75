"""The main job: the whole FeatureBox flow on the embedded default data, with a summary.

``run_demo`` generates the default data once (kept under ``$FBRAPIDS_DATA`` or
``~/.cache/fbrapids/data``), then runs :func:`fbrapids.pipeline.run_pipeline`: read, clean,
join, extract, merge, stream into DLRM on the tiered store, evaluate on the held-out last
day.

Example:
    >>> import tempfile
    >>> r = run_demo(rows=3000, data_dir=tempfile.mkdtemp(), progress=False)  # doctest: +SKIP
    >>> r.metrics["auc"] > 0.5  # doctest: +SKIP
    True
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from fbrapids.errors import CheckpointError

log = logging.getLogger(__name__)


def default_data_dir(rows: int, seed: int) -> Path:
    """Where the demo keeps its generated data: ``$FBRAPIDS_DATA`` or ~/.cache/fbrapids/data."""
    root = Path(os.environ.get("FBRAPIDS_DATA", Path.home() / ".cache" / "fbrapids" / "data"))
    return root / f"default-{rows}-seed{seed}"


def run_demo(rows: int = 200_000, data_dir: str | Path | None = None, backend: str | None = None,
             model: str = "dlrm", scheduler: str | None = None, seed: int = 0, progress: bool = True,
             work_dir: str | Path | None = None, batch_size: int = 2048,
             checkpoint_every: int | None = None, resume: bool = False) -> Any:
    """Generate (once) the default data and run the pipeline on it; returns the result.

    The data is generated only into an empty folder or one the demo made (see
    :func:`fbrapids.datagen.ensure_dataset`).  With ``resume`` the run continues from the
    newest verified checkpoint in ``work_dir`` (which must then be given).
    """
    from fbrapids.cluster import close_client, connect
    from fbrapids.datagen import ensure_dataset, read_metadata
    from fbrapids.pipeline import run_pipeline

    if resume and work_dir is None:
        raise CheckpointError("resume needs the work dir of the run to continue (--work-dir)")
    data = Path(data_dir) if data_dir is not None else default_data_dir(rows, seed)
    ensure_dataset(rows, data, seed=seed)
    client = connect(scheduler) if scheduler else None
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="fbrapids-demo-"))
    try:
        result = run_pipeline(data, backend=backend, model=model, client=client, seed=seed, progress=progress,
                              work_dir=work, batch_size=batch_size, checkpoint_every=checkpoint_every,
                              resume=resume)
    finally:
        if client is not None:
            close_client(client)
    result.oracle_auc = read_metadata(data).get("oracle_auc")
    return result
