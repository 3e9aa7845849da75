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
    """P4 (a GPU-path fix): in a dask-cuda worker fbrapids puts statistics over a pool that has
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


class _Device:
    """One GPU as its memory goes: a stand-in for the driver's count (``cudaMemGetInfo``)
    under rmm's resource classes, which reserve what they are made with."""

    GiB = 2**30

    def __init__(self, total: int, context: int) -> None:
        self.total, self.context, self.used = total, context, context  # this process's CUDA context

    def free(self) -> int:
        return self.total - self.used

    def rmm(self):
        import types

        device = self

        class Resource:
            def __init__(self, upstream=None, initial_pool_size=0):
                self.upstream, self.size = upstream, initial_pool_size
                device.used += initial_pool_size

            def get_upstream(self):
                return self.upstream

            def pool_size(self):
                return self.size

        class Cuda(Resource):
            pass

        class Pool(Resource):
            pass

        class Stats(Resource):
            allocation_counts = types.SimpleNamespace(current_bytes=0)

        current = {"mr": Cuda()}
        mr = types.SimpleNamespace(CudaMemoryResource=Cuda, PoolMemoryResource=Pool, StatisticsResourceAdaptor=Stats,
                                   get_current_device_resource=lambda: current["mr"],
                                   set_current_device_resource=lambda r: current.update(mr=r),
                                   available_device_memory=lambda: (device.free(), device.total))
        return types.SimpleNamespace(mr=mr)

    def worker_pool(self, rmm_pool_size) -> int:
        """The bytes a dask-cuda worker's pool asks for (``parse_device_memory_limit``: a float
        <= 1 is a fraction of the device's total memory, an int is bytes)."""
        return int(rmm_pool_size * self.total) if isinstance(rmm_pool_size, float) else int(rmm_pool_size)


@pytest.mark.parametrize("pool_first", [False, True], ids=["cluster-first", "pool-made-before"])
def test_one_pool_per_device_beside_a_local_cluster_worker(monkeypatch, pool_first):
    """The client made its pool (half the free memory), then dask-cuda gave the
    worker on the same GPU half the *total*: on an H200 the worker asked for 70.20 GiB and
    found 69.32.  Now the client makes no pool when a worker shares its device, or, holding
    one already, the worker's pool is sized from what is left.  The device and rmm's classes
    are stand-ins (as in P4's test); the planning is fbrapids' own (``cuda_cluster_plan``)."""
    import types

    from fbrapids.frames import cluster

    gpu = _Device(total=int(140.40 * _Device.GiB), context=int(0.6 * _Device.GiB))  # an H200
    rmm = gpu.rmm()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(B.POOL_ENV, raising=False)
    monkeypatch.setattr(B, "_POOL_LEFT", [])
    monkeypatch.setattr(B, "_POOL_MADE", [])
    monkeypatch.setattr(B, "try_import", lambda name: None)  # no cupy / torch routing here
    monkeypatch.setattr(B, "visible_devices", lambda: (1, ""))
    made = []
    runtime = types.SimpleNamespace(memGetInfo=lambda: (gpu.free(), gpu.total))

    def get_backend(name=None):  # as _gpu_backend: the process's pool set up when the backend is first made
        if not made:
            made.append(B._setup_device_memory(rmm))  # noqa: SLF001 - the unit under test
        return types.SimpleNamespace(xp=types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime)))

    monkeypatch.setattr(B, "get_backend", get_backend)
    if pool_first:  # e.g. a GPU extract ran in this process before the cluster was started
        get_backend("gpu")
        assert made[0].created
    options = cluster.cuda_cluster_plan(None, "gpu", {})
    assert options["n_workers"] == 1 and made
    if not pool_first:
        assert made[0].pool is None and not made[0].created  # the worker's pool is the device's one
    asks = gpu.worker_pool(options["rmm_pool_size"])
    finds = gpu.free() - gpu.context  # after the worker's own CUDA context
    assert 0 < asks <= finds, f"the worker asks {asks / gpu.GiB:.2f} GiB and finds {finds / gpu.GiB:.2f}"
    assert asks >= (0.5 * gpu.free() if pool_first else 0.5 * gpu.total) - 256  # still FBRAPIDS_RMM_POOL's share


def test_a_worker_on_another_device_leaves_this_process_its_pool(monkeypatch):
    from fbrapids.frames import cluster

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert cluster.worker_devices({"CUDA_VISIBLE_DEVICES": [1]}, 1, 2) == ["1"]
    assert cluster.client_device() not in cluster.worker_devices({"CUDA_VISIBLE_DEVICES": [1]}, 1, 2)
    assert cluster.client_device() in cluster.worker_devices({}, 2, 2)


def test_a_device_list_option_of_another_kind_is_refused_naming_it():
    from fbrapids.errors import ArgumentError
    from fbrapids.frames import cluster

    with pytest.raises(ArgumentError, match="CUDA_VISIBLE_DEVICES=3"):
        cluster.worker_devices({"CUDA_VISIBLE_DEVICES": 3}, 1, 4)
