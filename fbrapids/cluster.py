"""Dask clusters for extraction: one worker per GPU with dask-cuda, else a CPU LocalCluster.

Example:
    >>> client = local_cluster(n_workers=1, backend="cpu")  # doctest: +SKIP
    >>> client.close()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from typing import Any

from fbrapids import backend as _backend

log = logging.getLogger(__name__)


def local_cluster(n_workers: int | None = None, threads_per_worker: int = 1, backend: str | None = None,
                  **cluster_kwargs: Any) -> Any:
    """A ``distributed.Client`` on a new local cluster.

    On the GPU backend this is dask-cuda's ``LocalCUDACluster`` (one worker per GPU, each
    with an RMM pool: see :func:`fbrapids.backend.cuda_cluster_options`); otherwise a ``LocalCluster`` of worker processes (default: one per core, at most 4).

    Example:
        >>> client = local_cluster(n_workers=2, backend="cpu")  # doctest: +SKIP
    """
    from distributed import Client

    be = _backend.get_backend(backend)
    if be.is_gpu:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError as exc:
            raise _backend.BackendUnavailableError(
                "the GPU backend needs dask-cuda for a local cluster (pip install 'fbrapids[gpu]')") from exc
        # every worker gets an RMM pool (FBRAPIDS_RMM_POOL, default half the device) with cupy on it
        options = _backend.cuda_cluster_options(**({"n_workers": n_workers} if n_workers else {}), **cluster_kwargs)
        cluster = LocalCUDACluster(**options)
    else:
        from distributed import LocalCluster

        workers = n_workers or max(1, min(4, os.cpu_count() or 1))
        cluster_kwargs.setdefault("dashboard_address", None)
        cluster = LocalCluster(n_workers=workers, threads_per_worker=threads_per_worker, processes=True,
                               **cluster_kwargs)
    client = Client(cluster)
    log.info("started %s with %d workers", type(cluster).__name__, len(client.scheduler_info()["workers"]))
    return client


def connect(address: str) -> Any:
    """A ``distributed.Client`` connected to the scheduler at ``address`` (``tcp://host:8786``).

    Example:
        >>> connect("tcp://127.0.0.1:8786")  # doctest: +SKIP
    """
    from distributed import Client

    return Client(address)


def get_client(address: str | None = None, **local_kwargs: Any) -> tuple[Any, bool]:
    """``(client, owned)``: a client to ``address``, else a new local cluster (``owned`` True).

    Example:
        >>> client, owned = get_client(None, n_workers=1)  # doctest: +SKIP
    """
    if address:
        return connect(address), False
    return local_cluster(**local_kwargs), True


def close_client(client: Any) -> None:
    """Close a client, and its cluster when it was a local one we started."""
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()
