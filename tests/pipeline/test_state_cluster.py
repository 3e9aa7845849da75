"""Cluster faults for real: an HTTP server where a scheduler should be, every worker
process killed, a worker restarted mid-run (kernel launch counts must survive it)."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask
import pytest

from fbrapids.app.pipeline import run_pipeline
from fbrapids.errors import ClusterError
from fbrapids.frames.cluster import connect

REPO = Path(__file__).resolve().parents[2]


def test_an_http_port_is_not_a_scheduler_and_fails_fast():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"tcp://127.0.0.1:{server.server_address[1]}"
        t = time.monotonic()
        with pytest.raises(ClusterError, match=f"{address} accepted a connection but is not a dask scheduler "
                                               r"\(it sent nothing within 3 s\)"):
            connect(address, timeout=3)
        assert time.monotonic() - t < 10
    finally:
        server.shutdown()
        server.server_close()


def _worker(address: str) -> subprocess.Popen:
    """A dask worker process of its own (no nanny: killed, it stays dead)."""
    return subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--no-nanny",
                             "--nthreads", "1", "--no-dashboard"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.fixture
def own_workers():
    """A scheduler with two worker processes of their own (no nanny: killed, they stay dead)."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=0, processes=True, dashboard_address=None, host="127.0.0.1")
    client = Client(cluster)
    workers = [_worker(cluster.scheduler_address) for _ in range(2)]
    try:
        client.wait_for_workers(2, timeout=120)
        # the cluster object learns of workers from the scheduler a little later; a worker it
        # never listed, once removed, makes its close raise KeyError (distributed's
        # deploy/spec.py _update_worker_status), so wait until it lists both
        deadline = time.monotonic() + 60
        while len(cluster.scheduler_info.get("workers", {})) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield client, workers
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        client.close()
        cluster.close()


def _kill_all(client, workers) -> None:
    for w in workers:
        w.send_signal(signal.SIGKILL)
        w.wait()
    deadline = time.time() + 60
    while client.scheduler_info()["workers"] and time.time() < deadline:
        time.sleep(0.1)


def test_losing_every_worker_mid_run_is_an_error_naming_scheduler_and_partition(gen_dir, tmp_path, own_workers):
    from fbrapids import kernels as kernel_stats

    client, workers = own_workers
    addr = client.scheduler.address
    killed: list[float] = []

    def kill_when_extracting() -> None:
        deadline = time.time() + 300
        while time.time() < deadline:
            if any(c["launches"] > 0 for c in client.run(kernel_stats.stats).values()):
                killed.append(time.monotonic())
                _kill_all(client, workers)
                return
            time.sleep(0.02)

    threading.Thread(target=kill_when_extracting, daemon=True).start()
    with dask.config.set({"fbrapids.worker-wait": 3}):
        # a partition waiting for a worker, or a pass whose persisted inputs died with the workers
        with pytest.raises(ClusterError, match=f"partition.*: the scheduler {addr} (has had no worker|lost the data)"):
            run_pipeline(gen_dir, client=client, batch_size=128, progress=False, work_dir=tmp_path,
                         count_clean=False, checkpoint=False, backend="cpu")
    assert killed and time.monotonic() - killed[0] < 60


def test_a_scheduler_without_workers_is_an_error_before_any_work(gen_dir, tmp_path, own_workers):
    client, workers = own_workers
    _kill_all(client, workers)
    with dask.config.set({"fbrapids.worker-wait": 2}):
        with pytest.raises(ClusterError, match=f"extracting {gen_dir}: the scheduler {client.scheduler.address} "
                                               "has had no worker for 2 s"):
            run_pipeline(gen_dir, client=client, batch_size=512, progress=False, work_dir=tmp_path,
                         count_clean=False, checkpoint=False, backend="cpu")


def test_launch_counter_stays_right_across_a_worker_restart(gen_dir, own_workers):
    from fbrapids import kernels as kernel_stats
    from fbrapids.app.pipeline import feature_frame
    from fbrapids.frames.cluster import WorkerCounters

    client, workers = own_workers
    counters = WorkerCounters(client, kernel_stats.stats)
    with dask.config.set(scheduler=client):
        feature_frame(gen_dir, backend="cpu")[0].compute()
        counters.poll()
        before = sum(c["launches"] for c in counters.snapshots())
        assert before > 0
        # every worker process replaced (killed; new processes started, as a supervisor would):
        # the new ones' in-process counters start at zero
        _kill_all(client, workers)
        workers[:] = [_worker(client.scheduler.address) for _ in range(2)]
        client.wait_for_workers(2, timeout=120)
        feature_frame(gen_dir, backend="cpu")[0].compute()
    after_restart = sum(c["launches"] for c in client.run(kernel_stats.stats).values())
    total = sum(c["launches"] for c in counters.snapshots())
    # the live workers alone under-report (what the summary used to print); the counter does not
    assert 0 < after_restart < total == before + after_restart


def test_an_unwritable_checkpoint_dir_fails_before_training(gen_dir, tmp_path):
    from fbrapids.errors import PreflightError

    work = tmp_path / "work"
    work.mkdir()
    (work / "checkpoints").write_text("a file where the checkpoint dir should be")
    t = time.monotonic()
    with pytest.raises(PreflightError, match=f"the checkpoint dir {work / 'checkpoints'} is not writable"):
        run_pipeline(gen_dir, batch_size=512, progress=False, work_dir=work, count_clean=False, backend="cpu")
    assert time.monotonic() - t < 120


def test_a_lost_scheduler_is_one_error_naming_its_address(gen_dir, tmp_path):
    """The scheduler killed mid-run (a process of its own, SIGKILL): one ClusterError naming
    its address, not the client's 'ConnectionPool closing.' after its own 30 s of retries."""
    from fbrapids.frames.cluster import close_client

    file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--no-dashboard", "--scheduler-file", str(file)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.monotonic() + 120
        while not file.exists():
            assert scheduler.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.1)  # the file written whole
        import json

        addr = json.loads(file.read_text())["address"]
        worker = _worker(addr)
        client = connect(addr)
        client.wait_for_workers(1, timeout=120)

        def kill_when_computing() -> None:  # the run's first compute (planning's, or a partition's)
            end = time.time() + 300
            while time.time() < end:
                if any(client.processing().values()):
                    scheduler.kill()
                    return
                time.sleep(0.02)

        threading.Thread(target=kill_when_computing, daemon=True).start()
        with pytest.raises(ClusterError) as err:
            run_pipeline(gen_dir, client=client, batch_size=128, progress=False, work_dir=tmp_path / "w",
                         count_clean=False, checkpoint=False, backend="cpu")
        # (when something answers at the address by the time the run looks, the client's own word, its tasks
        # cancelled for the lost connection, is the reason given: the same line, its cause worded as known)
        assert str(err.value).startswith(f"the run on {gen_dir}: lost the dask scheduler at {addr}: its connection "
                                         "closed"), err.value
        assert len(str(err.value).splitlines()) == 1
        close_client(client)
    finally:
        for p in (scheduler, worker):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_tasks_cancelled_for_a_lost_connection_are_one_error_while_the_address_answers():
    """The client cancels the run's tasks for a lost connection (``scheduler-connection-lost``)
    and, by the time the run looks, something answers at the scheduler's address again (a
    restarted scheduler): still one ClusterError naming the address, its cause worded as known.
    Here a live scheduler answers, and the cancellation is the client's exception as dask raises it."""
    from distributed import Client, LocalCluster
    from distributed.client import FutureCancelledError

    from fbrapids.frames.cluster import frozen_worker_watchdog

    with LocalCluster(n_workers=0, processes=False, dashboard_address=None, protocol="tcp", host="127.0.0.1") as cluster, \
            Client(cluster) as client:
        with pytest.raises(ClusterError) as err:
            with frozen_worker_watchdog(client, "the run"):
                raise FutureCancelledError("k", "scheduler-connection-lost", "Client lost the connection")
        assert str(err.value).startswith(f"the run: lost the dask scheduler at {cluster.scheduler_address}: its "
                                         "connection closed mid-run and the client cancelled the run's tasks")
        with pytest.raises(ValueError):  # anything else passes through as it is
            with frozen_worker_watchdog(client, "the run"):
                raise ValueError("a bug of the run's own")
