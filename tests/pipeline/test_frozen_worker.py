"""A frozen (SIGSTOPped) dask worker ends a run by default, within ``fbrapids.worker-silence``
seconds, with one error naming the worker and what to do: while streaming partitions
(:func:`fbrapids.frames.cluster.result_or_error`) and while planning (any compute under
:func:`fbrapids.frames.cluster.frozen_worker_watchdog`).  A real LocalCluster of worker processes."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest


def _freeze_the_busy_worker(client, pids: dict, stopped: list) -> None:
    for _ in range(1000):
        busy = [a for a, tasks in client.processing().items() if tasks]
        if busy:
            stopped.append(busy[0])
            os.kill(pids[busy[0]], signal.SIGSTOP)
            return
        time.sleep(0.01)


def test_a_frozen_worker_ends_planning_and_streaming_naming_it() -> None:
    import dask
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster

    from fbrapids.errors import ClusterError
    from fbrapids.frames.cluster import frozen_worker_watchdog
    from fbrapids.frames.partition_pass import iter_partitions

    def slow(part: pd.DataFrame) -> pd.DataFrame:
        time.sleep(0.5)
        return part

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        pids = client.run(os.getpid)
        for phase in ("streaming", "planning"):
            frame = dd.from_pandas(pd.DataFrame({"a": range(40)}), npartitions=4).map_partitions(slow)
            stopped: list[str] = []
            freezer = threading.Thread(target=_freeze_the_busy_worker, args=(client, pids, stopped))
            t0 = time.monotonic()
            try:
                # no partition deadline: the default; only the silence limit is shortened for the test
                with dask.config.set({"fbrapids.worker-silence": 5.0, "scheduler": client}):
                    with pytest.raises(ClusterError) as raised:
                        freezer.start()
                        if phase == "streaming":
                            for _ in iter_partitions(frame, window=1):
                                pass
                        else:
                            with frozen_worker_watchdog(client, "planning"):
                                frame.sum().compute()
                    freezer.join()
            finally:
                for addr in stopped:
                    os.kill(pids[addr], signal.SIGCONT)
            took = time.monotonic() - t0
            msg = str(raised.value)
            assert stopped, "no worker was found busy"
            assert stopped[0] in msg and ("partition" in msg) == (phase == "streaming"), msg
            assert "has not been heard from for more than 5 s" in msg and "kill -CONT" in msg, msg
            assert len(msg.splitlines()) == 1
            assert took < 120  # ended at the silence limit, not hung (the default deadline is 120 s)
