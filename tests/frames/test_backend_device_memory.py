"""Device memory: the RMM pool the GPU backend sets up, and how free memory is counted.

The size parsing and the dask-cuda options are plain code and run everywhere; the pool
itself needs a device (``gpu`` marker).
"""

from __future__ import annotations

import pytest

from fbrapids.frames import backend as B


@pytest.mark.parametrize("text, free, want", [
    ("0.5", 10_000, 4864),            # half the free memory, down to a multiple of 256
    ("0.25", 2**30, 2**28),
    ("8GiB", 0, 8 * 2**30),
    ("512MB", 0, 512 * 10**6 // 256 * 256),
    ("1.5g", 0, 1_500_000_000 // 256 * 256),
    ("4096", 0, 4096),
    ("off", 10, None), ("0", 10, None), ("none", 10, None),
    (None, 1 << 20, 1 << 19),          # unset: the default, half the free memory
])
def test_pool_size_parsing(text, free, want):
    assert B.parse_pool_size(text, free) == want


@pytest.mark.parametrize("bad", ["lots", "8 parsecs", "-1GiB", "0.5.5"])
def test_pool_size_errors_name_the_variable(bad):
    with pytest.raises(ValueError, match=r"\$FBRAPIDS_RMM_POOL='.*' is not a size"):
        B.parse_pool_size(bad, 100)


def test_cuda_cluster_options_give_each_worker_a_pool(monkeypatch):
    monkeypatch.delenv(B.POOL_ENV, raising=False)
    opts = B.cuda_cluster_options(n_workers=1)
    assert opts == {"n_workers": 1, "rmm_pool_size": 0.5, "rmm_allocator_external_lib_list": ["cupy"]}
    monkeypatch.setenv(B.POOL_ENV, "12GiB")
    assert B.cuda_cluster_options()["rmm_pool_size"] == "12GiB"
    monkeypatch.setenv(B.POOL_ENV, "off")
    assert "rmm_pool_size" not in B.cuda_cluster_options()
    monkeypatch.setenv(B.POOL_ENV, "0.3")
    assert B.cuda_cluster_options(rmm_pool_size="1GB")["rmm_pool_size"] == "1GB"  # given options win
    assert "rmm_pool_size" not in B.cuda_cluster_options(rmm_async=True)  # dask-cuda warns on both


def test_no_device_memory_on_the_cpu():
    if not B.gpu_missing():
        pytest.skip("a GPU backend is available here")
    mem = B.device_memory()
    assert mem.pool is None and mem.pool_free_bytes() == 0


@pytest.mark.gpu
def test_gpu_backend_allocates_from_one_counted_pool():
    import cupy
    import rmm

    be = B.get_backend("gpu")
    mem = B.device_memory()
    assert mem.pool is not None and mem.stats is not None
    chain = B.resource_chain(rmm.mr.get_current_device_resource())
    assert mem.pool in chain and mem.stats in chain
    driver_free_before = int(cupy.cuda.runtime.memGetInfo()[0])
    used_before = mem.stats.allocation_counts.current_bytes
    free_before = be.free_device_memory()
    assert free_before >= driver_free_before  # the pool's unused part counts as free
    n = 64 << 20
    block = cupy.empty(n, dtype=cupy.uint8)  # cupy allocates through RMM: counted by the adaptor
    assert mem.stats.allocation_counts.current_bytes - used_before >= n
    if mem.pool.pool_size() >= mem.stats.allocation_counts.current_bytes:
        # served from the pool: the driver sees nothing new, the estimate drops by the block
        assert abs(int(cupy.cuda.runtime.memGetInfo()[0]) - driver_free_before) < n // 2
        assert free_before - be.free_device_memory() >= n - (1 << 20)
    del block


@pytest.mark.gpu
def test_torch_allocates_through_rmm_when_routed():
    torch = pytest.importorskip("torch")
    mem = B.device_memory()
    if not mem.torch:
        pytest.skip("torch touched CUDA before the GPU backend was made (it keeps its own allocator)")
    before = mem.stats.allocation_counts.current_bytes
    t = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    assert mem.stats.allocation_counts.current_bytes - before >= 32 << 20
    del t


@pytest.mark.gpu
def test_to_host_keeps_lists_arrow_backed_and_nullable_ints_exact():
    import pandas as pd
    import pyarrow as pa

    be = B.get_backend("gpu")
    host = pd.DataFrame({"i": pd.array([2**60 + 1, None, 3], dtype="Int64"),
                         "l": pd.Series(pd.arrays.ArrowExtensionArray(pa.array([[1, 2], None, []], pa.list_(pa.int64())))),
                         "s": pd.Series(["a", None, "c"], dtype="str"), "f": [0.5, 1.5, 2.5]},
                        index=[10, 20, 30])
    dev = B.to_backend(host, be)[lambda d: d["f"] > 1.0]  # a filtered partition: index 20, 30
    back = B.to_host(dev)
    assert back.index.tolist() == [20, 30]
    assert str(back["i"].dtype) == "Int64" and back["i"].tolist()[1] == 3 and back["i"].isna().tolist() == [True, False]
    assert isinstance(back["l"].dtype, pd.ArrowDtype) and back["l"].tolist()[1] == []
    assert back["s"].tolist()[1] == "c" and back["f"].tolist() == [1.5, 2.5]
    assert B.to_host(B.to_backend(host, be)["i"]).tolist()[0] == 2**60 + 1


def test_an_adopted_pool_in_use_counts_none_of_its_memory_as_free(monkeypatch):
    """P4 (issue 36): in a dask-cuda worker fbrapids puts statistics over a pool that has
    already handed out memory; ``pool_size - current`` then counted that memory as free.
    The resource classes stand in for rmm's (made without a device); the logic is fbrapids'."""
    import types

    class Resource:
        def __init__(self, upstream=None, initial_pool_size=0):
            self.upstream, self.size = upstream, initial_pool_size

        def get_upstream(self):
            return self.upstream

    class Cuda(Resource):
        pass

    class Pool(Resource):
        def pool_size(self):
            return 10 << 30

    class Stats(Resource):
        allocation_counts = types.SimpleNamespace(current_bytes=1 << 30)  # counted since it was put on

    current = {"mr": Pool(Cuda())}  # dask-cuda's pool, 10 GiB, part of it already in use
    mr = types.SimpleNamespace(CudaMemoryResource=Cuda, PoolMemoryResource=Pool, StatisticsResourceAdaptor=Stats,
                               get_current_device_resource=lambda: current["mr"],
                               set_current_device_resource=lambda r: current.update(mr=r),
                               available_device_memory=lambda: (0, 0))
    monkeypatch.setattr(B, "try_import", lambda name: None)  # no cupy / torch routing here
    mem = B._setup_device_memory(types.SimpleNamespace(mr=mr))  # noqa: SLF001 - the unit under test
    assert isinstance(current["mr"], Stats) and mem.pool is not None and not mem.counted
    assert mem.pool_free_bytes() == 0  # was 9 GiB: the pool's earlier allocations unseen
    mem.counted = True
    assert mem.pool_free_bytes() == 9 << 30
