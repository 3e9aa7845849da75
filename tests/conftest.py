"""Shared fixtures: the real samples in ../shared/data, generated data, GPU skipping."""

from __future__ import annotations

from pathlib import Path

import pytest

import fbrapids  # noqa: F401  (registers the .fbx accessor)
from fbrapids.backend import gpu_missing

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = gpu_missing()
    if not missing:
        return
    skip = pytest.mark.skip(reason="needs a GPU backend: missing " + "; ".join(missing))
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real CTR samples; tests using them skip when ../shared/data is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real samples not found at {SHARED_DATA} (see shared/data/DATA.md)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated workload folder (5,000 impressions, seed 0), made once per session."""
    from fbrapids.datagen import generate

    out = tmp_path_factory.mktemp("gen5k")
    generate(5000, out, seed=0)
    return out


@pytest.fixture(scope="session")
def local_cluster():
    """A real dask LocalCluster with 2 worker processes, and a client to it.

    The client is not made the default: tests that use it say so (``client.compute``),
    and later tests' plain ``.compute()`` keep running in their own process.
    """
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module of many tiny torch ops: a thread pool only adds
    hand-offs on a shared CI machine, and the resume tests' child processes run with one
    thread too (the same reduction order, so bit-exact comparisons hold)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
