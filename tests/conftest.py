"""Shared fixtures: the real samples in ../shared/data, generated data, GPU skipping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# the suite's writes skip fsync (each costs ~4 ms on this kind of disk; one small demo run writes
# ~700): writes stay atomic, and a killed process, what the fault tests inject, leaves the same
# files either way.  tests/files/test_atomic_fsync.py checks the switch both ways; FBRAPIDS_FSYNC=1
# make test runs the whole suite with real fsyncs.  Subprocesses and dask workers inherit it.
os.environ.setdefault("FBRAPIDS_FSYNC", "0")

import fbrapids  # noqa: F401  (registers the .fbx accessor)
from fbrapids.frames.backend import gpu_missing, resolve_name

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


#: the test files that take longest (a minute or more: launched ranks, CLI runs killed and
#: resumed, served exports, nvrtc compiles), run first: ``make test``'s two xdist workers take
#: files in collection order, so a long file left for the end would run alone while the other
#: worker idles
LONGEST_FIRST = ("tests/trainers/test_distributed.py", "tests/app/test_state_cli.py",
                 "tests/serving/test_serving_demo_models.py", "tests/kernels/test_kernels_cuda_compile.py",
                 "tests/pipeline/test_pipeline_benchmark.py", "tests/notebooks/test_notebooks.py",
                 "tests/app/test_demo_leaves_nothing.py", "tests/serving/test_attack_benchmark.py")


def _longest_first(items: list[pytest.Item]) -> None:
    """Move the files of :data:`LONGEST_FIRST` to the front, in that order; every file keeps
    its own tests' order and the others keep theirs (a stable sort)."""
    gone = [path for path in LONGEST_FIRST if not (REPO / path).is_file()]
    if gone:  # a moved or renamed file: say so, rather than quietly scheduling it last again
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names files that are not there: {gone}")
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests skip where the GPU backend is missing; ``cpu_only(reason)`` tests skip,
    with their reason, when the suite runs on the GPU backend (``FBRAPIDS_BACKEND=gpu``).

    Markers are looked up with ``get_closest_marker`` (not ``item.keywords``, which also
    holds the names of the folders above the test, e.g. a checkout named ``gpu``).
    """
    missing = gpu_missing()
    on_gpu = resolve_name() == "gpu"
    for item in items:
        if missing and item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason="needs a GPU backend: missing " + "; ".join(missing)))
        cpu_only = item.get_closest_marker("cpu_only")
        if on_gpu and cpu_only is not None:
            why = cpu_only.kwargs.get("reason") or (cpu_only.args[0] if cpu_only.args else "")
            if not why:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.cpu_only needs a reason")
            item.add_marker(pytest.mark.skip(reason=f"CPU-only on the GPU backend: {why}"))
    _longest_first(items)


@pytest.fixture(params=["cpu", "cuda"])
def device(request: pytest.FixtureRequest) -> str:
    """A torch device to run on: ``cpu``, and ``cuda`` wherever torch sees a CUDA device
    (with or without the cudf backend, so not behind the ``gpu`` marker)."""
    if request.param == "cuda":
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
    return request.param


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real CTR samples; tests using them skip when ../shared/data is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real samples not found at {SHARED_DATA} (see shared/data/DATA.md)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated workload folder (5,000 impressions, seed 0), made once per session."""
    from fbrapids.datasets.synthetic.generate import generate

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

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture
def stops_heard():
    """The stop signals at their terminal dispositions for a test that sends one to itself:
    Ctrl-C (SIGINT) raising ``KeyboardInterrupt``, SIGTERM and SIGHUP at their default
    action, restored after.  A suite started otherwise inherits others, which Python and the
    CLI keep: a shell's background job (``make test &``) has SIGINT ignored, ``nohup``
    SIGHUP; such a test would never hear its signal (a fresh-clone run under ``nohup ... &``
    failed two this way)."""
    import signal

    wanted = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
              signal.SIGHUP: signal.SIG_DFL}
    before = {sig: signal.signal(sig, handler) for sig, handler in wanted.items()}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


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


@pytest.fixture(autouse=True, scope="session")
def _reference_rates_outside_the_repo(tmp_path_factory):
    """A quiet machine's benchmark smoke runs record reference rates (benchmarks/machine.py):
    into a file of this session's, never into the repository's benchmarks/results."""
    if not os.environ.get("FBRAPIDS_REFERENCE_RATES"):
        os.environ["FBRAPIDS_REFERENCE_RATES"] = str(tmp_path_factory.mktemp("rates") / "reference_rates.json")
    yield
