"""The main job: the whole FeatureBox flow on the embedded default data, with a summary.

``run_demo`` generates the default data once (kept under ``$FBRAPIDS_DATA`` or
``~/.cache/fbrapids/data``, a cache bounded by ``$FBRAPIDS_DATA_CACHE_BYTES``, default
2 GiB, least recently used data sets removed first; ``fbrapids cache --clear`` empties it:
:mod:`fbrapids.runs.data_cache`), then runs :func:`fbrapids.app.pipeline.run_pipeline`: read, clean,
join, extract, merge, stream into DLRM on the tiered store, evaluate on the held-out last
day.

**Nothing is left behind unasked.**  Without ``work_dir`` the run's work dir (the
embedding store's SSD files, and the checkpoint an ``export`` is made from) is a temporary
``fbrapids-demo-*`` folder under the temporary folder (``$TMPDIR``), removed on every exit
path: a completed run, an error, Ctrl-C (SIGINT), SIGTERM and SIGHUP.  What should stay is
asked for: ``export`` (the trained model as a serving export) or ``work_dir`` (kept as it
is).  A run killed outright (SIGKILL, out of memory) cannot clean up; the next demo removes
such folders of runs that no longer run (:func:`fbrapids.runs.workdir.remove_abandoned_work_dirs`).

Example:
    >>> import tempfile
    >>> r = run_demo(rows=3000, data_dir=tempfile.mkdtemp(), progress=False)  # doctest: +SKIP
    >>> r.metrics["auc"] > 0.5  # doctest: +SKIP
    True
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from fbrapids.errors import CheckpointError, ExportError
from fbrapids.runs import data_cache
from fbrapids.runs.data_cache import default_data_dir  # noqa: F401  (where the demo keeps its data; re-exported)
from fbrapids.runs.workdir import temporary_work_dir

if TYPE_CHECKING:
    from fbrapids.app.pipeline import PipelineResult

log = logging.getLogger(__name__)

#: the name prefix of the demo's temporary work dirs under ``tempfile.gettempdir()``
WORK_PREFIX = "fbrapids-demo-"




def run_demo(rows: int = 200_000, data_dir: str | Path | None = None, backend: str | None = None,
             model: str = "dlrm", scheduler: str | None = None, seed: int = 0, progress: bool = True,
             work_dir: str | Path | None = None, batch_size: int = 2048,
             checkpoint_every: int | None = None, resume: bool = False,
             export: str | Path | None = None, nan: str = "error", tiers: str = "auto", tune: bool = False,
             memory_limit: int | str | None = None) -> PipelineResult:
    """Generate (once) the default data and run the pipeline on it; returns the result.

    The data is generated only into an empty folder or one the demo made (see
    :func:`fbrapids.datasets.synthetic.generate.ensure_dataset`), and held with a shared lock for the run.  With ``resume`` the run continues from the
    newest verified checkpoint in ``work_dir`` (which must then be given).  ``export``: also
    export the trained model for serving to this new or empty folder
    (:func:`fbrapids.app.demo_export.export_demo_checkpoint`), set as ``result.export``.
    ``nan``: NaN / inf / null in a dense feature, ``"error"`` or ``"zero"`` (see
    :func:`fbrapids.app.pipeline.run_pipeline`); ``tiers``: where the embedding rows live
    (:class:`~fbrapids.workloads.RunConfig`'s ``tiers``).  ``tune``: choose the recipe on a validation day first
    (``RunConfig(tune=True)``, :mod:`fbrapids.app.tuning`).  ``memory_limit``: the run's memory budget
    (``RunConfig.memory_limit``; None: half the machine's).  Without ``work_dir`` the work dir is temporary and removed before returning (module
    docstring); ``result.checkpoint`` is then None and ``result.removed_work_dir`` names it.
    """
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.datasets import synthetic
    from fbrapids.datasets.synthetic.generate import read_metadata, using_dataset
    from fbrapids.frames.backend import get_backend
    from fbrapids.frames.cluster import close_client, connect
    from fbrapids.workloads import RunConfig

    if resume and work_dir is None:
        raise CheckpointError("resume needs the work dir of the run to continue (--work-dir)")
    get_backend(backend)  # a backend that cannot run here is refused before the data is generated
    if export is not None and Path(export).exists() and (not Path(export).is_dir() or any(Path(export).iterdir())):
        raise ExportError(f"{export} is not a new or empty directory (the export is refused before training)")
    data = Path(data_dir) if data_dir is not None else default_data_dir(rows, seed)
    with contextlib.ExitStack() as stack:
        stack.enter_context(using_dataset(rows, data, seed=seed))  # not regenerated under this run
        if data_dir is None:  # the cache stays bounded: least recently used data sets out first
            data_cache.touch(data)
            data_cache.prune(data.parent, keep=data)
        client = connect(scheduler) if scheduler else None
        if client is not None:
            stack.callback(close_client, client)
        work = Path(work_dir) if work_dir is not None else stack.enter_context(temporary_work_dir(WORK_PREFIX))
        # a checkpoint is written where it is kept (work_dir), exported from (export) or asked for
        # (checkpoint_every); at the end of a run in a temporary work dir it would be removed unread (0.4-0.6 s
        # of a 3 s training at 200,000 rows, 131 MB written)
        config = RunConfig(backend=backend, model=model, seed=seed, progress=progress, work_dir=work,
                           batch_size=batch_size, checkpoint_every=checkpoint_every, resume=resume, nan=nan,
                           tiers=tiers, tune=tune, memory_limit=memory_limit,
                           checkpoint=work_dir is not None or export is not None or checkpoint_every is not None)
        result = run_pipeline(synthetic.workload(data), config, client=client)
        result.oracle_auc = read_metadata(data).get("oracle_auc")
        if export is not None:
            if not result.checkpoint:
                raise CheckpointError("the run left no checkpoint to export")
            from fbrapids.app.demo_export import export_demo_checkpoint

            result.export = str(export_demo_checkpoint(result.checkpoint, export, model=model, seed=seed))
        if work_dir is None:
            result.removed_work_dir, result.checkpoint = str(work), None  # removed on leaving this block
    return result
