"""Dask clusters for extraction: one worker per GPU with dask-cuda, else a CPU LocalCluster.

Example:
    >>> client = local_cluster(n_workers=1, backend="cpu")  # doctest: +SKIP
    >>> client.close()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping

from fbrapids.errors import ArgumentError, ClusterError
from fbrapids.frames import backend as _backend

if TYPE_CHECKING:  # (annotations only: distributed is imported where a cluster is made)
    from dask.typing import Key
    from distributed import Client, Future

log = logging.getLogger(__name__)


def local_cluster(n_workers: int | None = None, threads_per_worker: int = 1, backend: str | None = None,
                  **cluster_kwargs: object) -> Client:
    """A ``distributed.Client`` on a new local cluster.

    On the GPU backend this is dask-cuda's ``LocalCUDACluster`` (one worker per GPU, each
    with an RMM pool, one pool per device: see :func:`cuda_cluster_plan`); otherwise a
    ``LocalCluster`` of worker processes (default: one per core, at most 4).

    Example:
        >>> client = local_cluster(n_workers=2, backend="cpu")  # doctest: +SKIP
    """
    from distributed import Client

    if _backend.resolve_name(backend) == "gpu":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError as exc:
            _backend.get_backend(backend)  # a GPU backend that cannot run says why first
            raise _backend.BackendUnavailableError(
                "the GPU backend needs dask-cuda for a local cluster (pip install 'fbrapids[gpu]')") from exc
        cluster = LocalCUDACluster(**cuda_cluster_plan(n_workers, backend, cluster_kwargs))
    else:
        from distributed import LocalCluster

        workers = n_workers or max(1, min(4, os.cpu_count() or 1))
        cluster_kwargs.setdefault("dashboard_address", ":0")  # its HTTP server on a free port: never a clash on 8787
        cluster = LocalCluster(n_workers=workers, threads_per_worker=threads_per_worker, processes=True,
                               **cluster_kwargs)
    client = Client(cluster)
    log.info("started %s with %d workers", type(cluster).__name__, len(client.scheduler_info()["workers"]))
    return client


def budgeted_cluster(memory_limit: int, threads: int | None = None, backend: str | None = None) -> Client:
    """A ``distributed.Client`` on a new local cluster of ONE worker process limited to
    ``memory_limit`` bytes, with ``threads`` threads (default: one per core): past
    distributed's thresholds of that limit the worker spills its results to disk (60-70%),
    pauses (80%) and, past 95%, is restarted by its nanny (an error naming it, never a
    silent kill); shuffles on it are dask's P2P shuffle, whose buffers are on disk.  One
    worker: a run's budget is the whole tree's, and a second copy of every broadcast table
    would halve what each worker can hold.

    Example:
        >>> client = budgeted_cluster(2 << 30)  # doctest: +SKIP
    """
    try:
        return local_cluster(n_workers=1, threads_per_worker=threads or os.cpu_count() or 1, backend=backend,
                             memory_limit=int(memory_limit))
    except RuntimeError as exc:  # distributed: "Nanny failed to start"
        raise ClusterError(f"could not start a local dask cluster for the run ({exc}); its worker process starts "
                           "by importing the main module: a script that runs the pipeline at import must do so "
                           "under `if __name__ == \"__main__\":`") from exc


def worker_devices(cluster_kwargs: Mapping[str, object], workers: int, visible: int) -> list[str]:
    """The devices a ``LocalCUDACluster``'s ``workers`` workers use, as ``CUDA_VISIBLE_DEVICES``
    names them (worker i takes the i-th of the cluster's list: its ``CUDA_VISIBLE_DEVICES``
    option, else this process's, else all ``visible`` devices).

    Example:
        >>> worker_devices({}, 1, 2), worker_devices({"CUDA_VISIBLE_DEVICES": "2,3"}, 2, 4)
        (['0'], ['2', '3'])
    """
    given = cluster_kwargs.get("CUDA_VISIBLE_DEVICES")
    if given is None:
        given = os.environ.get("CUDA_VISIBLE_DEVICES") or [str(i) for i in range(visible)]
    if not isinstance(given, (str, Iterable)):
        raise ArgumentError(f"the cluster option CUDA_VISIBLE_DEVICES={given!r}: expected \"0,1\" or a list of devices")
    names = given.split(",") if isinstance(given, str) else [str(d) for d in given]
    return [n.strip() for n in names][:workers]


def client_device() -> str:
    """This process's CUDA device as ``CUDA_VISIBLE_DEVICES`` names it (the first visible one)."""
    where = os.environ.get("CUDA_VISIBLE_DEVICES")
    return where.split(",")[0].strip() if where else "0"


def cuda_cluster_plan(n_workers: int | None, backend: str | None, cluster_kwargs: dict[str, object]
                      ) -> dict[str, object]:
    """The ``LocalCUDACluster`` options of a local GPU cluster, one RMM pool per device: every
    worker gets a pool (``FBRAPIDS_RMM_POOL``, default half the device) with cupy on it, and
    when a worker shares this process's device this process makes no pool of its own
    (:func:`~fbrapids.frames.backend.leave_pool_to_workers`), or, holding one already, the
    workers' pools are sized from the memory left."""
    workers = cuda_worker_count(n_workers, _backend.visible_devices()[0])
    shared = client_device() in worker_devices(cluster_kwargs, workers, _backend.visible_devices()[0])
    no_pool_here = _backend.leave_pool_to_workers(f"the local cluster's worker on GPU {client_device()}") \
        if shared else True
    be = _backend.get_backend(backend)
    shared_free = None if no_pool_here else int(be.xp.cuda.runtime.memGetInfo()[0])
    return _backend.cuda_cluster_options(shared_free=shared_free, n_workers=workers, **cluster_kwargs)


def cuda_worker_count(requested: int | None, visible: int) -> int:
    """Workers of a ``LocalCUDACluster``: one per visible device unless fewer are asked for.

    dask-cuda gives each worker one GPU and refuses more workers than visible devices
    ("Can not scale beyond visible devices"); that is said here, naming the numbers.

    Example:
        >>> cuda_worker_count(None, 1), cuda_worker_count(2, 4)
        (1, 2)
    """
    if visible < 1:
        raise _backend.BackendUnavailableError("a LocalCUDACluster needs a visible CUDA device, and none is visible")
    if requested is None:
        return visible
    if requested < 1 or requested > visible:
        raise _backend.BackendUnavailableError(
            f"{requested} local GPU workers asked for, but this machine shows {visible} CUDA device(s): "
            "a LocalCUDACluster runs one worker per device (ask for at most that many, or leave it unset)")
    return requested


def probe_scheduler(address: str, timeout: float = 10.0) -> None:
    """Check that ``address`` (``tcp://host:port``) answers like a dask scheduler.

    A dask scheduler sends its handshake (a msgpack frame naming ``compression`` and
    ``pickle-protocol``) as soon as a connection is accepted; an HTTP server (the dashboard
    on 8787, say) sends nothing until it gets a request, and ``distributed.Client`` would
    wait on it for ever.  Raises :class:`~fbrapids.errors.ClusterError` naming the address
    when the peer sends something else, or nothing within ``timeout`` seconds, and at once
    when the connection is refused (nothing listens there).  Other schemes (``tls://``,
    ``ucx://``) and an unreachable host are left to the client (it retries until its own
    connect timeout).

    Example:
        >>> probe_scheduler("inproc://nothing")  # not tcp: left to distributed
    """
    if "://" in address and not address.startswith("tcp://"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"scheduler address {address!r} is not tcp://host:port")
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except ConnectionRefusedError:
        raise ClusterError(f"nothing listens at {address} (connection refused): start the scheduler first "
                           "(`dask scheduler` listens on 8786), or check the host and port") from None
    except OSError:
        return  # unreachable or slow (yet): distributed retries until its connect timeout
    got = b""
    deadline = time.monotonic() + timeout
    with sock:
        try:
            while len(got) < 256 and b"pickle-protocol" not in got and time.monotonic() < deadline:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = sock.recv(256)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
    if b"pickle-protocol" in got or b"compression" in got:
        return
    heard = f"it sent {got[:40]!r}" if got else f"it sent nothing within {timeout:g} s"
    raise ClusterError(f"{address} accepted a connection but is not a dask scheduler ({heard}); is this the "
                       "dashboard or another service's port? the scheduler listens on 8786 by default")


def connect(address: str, timeout: float = 30.0) -> Client:
    """A ``distributed.Client`` connected to the scheduler at ``address`` (``tcp://host:8786``).

    An address that is not a dask scheduler fails within ``timeout`` seconds with a
    :class:`~fbrapids.errors.ClusterError` (see :func:`probe_scheduler`), never hangs.

    Example:
        >>> connect("tcp://127.0.0.1:8786")  # doctest: +SKIP
    """
    from distributed import Client

    probe_scheduler(address, timeout=min(timeout, 10.0))
    try:
        return Client(address, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(f"cannot reach a dask scheduler at {address} within {timeout:g} s: {exc}") from exc
    except (TypeError, ValueError, ImportError, NotImplementedError) as exc:
        # distributed's own refusals of an address it cannot use from here: tls:// without a
        # TLS context, inproc:// of another process, ucx:// without its package
        raise ClusterError(f"cannot connect to the dask scheduler address {address}: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc


def worker_wait_s() -> float:
    """How long a run waits with no worker at all before it fails (dask config
    ``fbrapids.worker-wait``, seconds; default 60).

    Example:
        >>> worker_wait_s()
        60.0
    """
    import dask

    return float(dask.config.get("fbrapids.worker-wait", 60.0))


def partition_warn_s() -> float:
    """Seconds a partition may take before :func:`result_or_error` warns, naming the workers
    working on it (dask config ``fbrapids.partition-warn``; default 60; repeated each period).

    Example:
        >>> partition_warn_s()
        60.0
    """
    import dask

    return float(dask.config.get("fbrapids.partition-warn", 60.0))


def partition_deadline_s() -> float | None:
    """Seconds after which a partition still not computed is a :class:`~fbrapids.errors.ClusterError`
    naming the workers on it (dask config ``fbrapids.partition-deadline``; default None: no
    deadline, dask itself drops a worker silent for ``distributed.scheduler.worker-ttl``).

    Example:
        >>> partition_deadline_s() is None
        True
    """
    import dask

    value = dask.config.get("fbrapids.partition-deadline", None)
    return None if value is None else float(value)


def worker_silence_s() -> float:
    """Seconds a worker busy with a task may go unheard by the scheduler (a frozen worker:
    stopped, swapping, hung, stops its heartbeats) before the run fails naming it (dask
    config ``fbrapids.worker-silence``; default 120; a busy but healthy worker keeps beating).

    Example:
        >>> worker_silence_s()
        120.0
    """
    import dask

    return float(dask.config.get("fbrapids.worker-silence", 120.0))


def silent_workers(client: Client, limit: float) -> list[str]:
    """The workers processing a task that the scheduler has not heard from for more than
    ``limit`` seconds: ``"tcp://127.0.0.1:4242 (worker 1, 1 task(s), last heard 130 s ago)"``."""
    info = client.scheduler_info().get("workers", {})
    now = time.time()
    out = []
    for addr, tasks in client.processing().items():
        w = info.get(addr, {})
        heard = now - w["last_seen"] if "last_seen" in w else 0.0
        if tasks and heard > limit:
            out.append(f"{addr} (worker {w.get('name', '?')}, {len(tasks)} task(s), last heard {heard:.0f} s ago)")
    return out


def silence_message(what: str, client: Client, silent: list[str]) -> str:
    """The one line a frozen worker ends a run with: who, since when, and what to do."""
    return (f"{what}: the dask worker {'; '.join(silent)} has not been heard from for more than "
            f"{worker_silence_s():g} s while computing for this run (frozen: stopped, swapping or hung); on the "
            f"scheduler {client.scheduler.address}. Resume it (a stopped process: kill -CONT <its pid>), restart or "
            "remove it, then rerun; or raise dask config fbrapids.worker-silence")


def scheduler_lost(client: Client, timeout: float = 1.0) -> bool:
    """Whether ``client`` lost its scheduler: its connection closed (the client reconnecting,
    or closed) and nothing answers at the scheduler's address within ``timeout`` (a
    ``tcp://`` one refuses the connection, or cannot be reached); a scheduler that listens
    again is left to the client's reconnection.

    Example:
        >>> class Gone:  # a client whose connection closed, of a scheduler where nothing listens
        ...     status = "connecting"
        ...     class scheduler:
        ...         address = "tcp://127.0.0.1:1"
        >>> scheduler_lost(Gone())
        True
    """
    if getattr(client, "status", "running") == "running":
        return False
    address = str(getattr(client.scheduler, "address", ""))
    if not address.startswith("tcp://"):
        return True  # closed, and no way to ask another scheme here: lost
    host, _, port = address[len("tcp://"):].rstrip("/").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except (OSError, ValueError):
        return True
    return False


def lost_scheduler_message(what: str, client: Client, gone: bool = True) -> str:
    """The one line a lost scheduler ends a run with: which address, and what to do; ``gone``:
    nothing answers at the address now (:func:`scheduler_lost`), else only the connection is
    known lost (:func:`connection_lost`: the client cancelled the run's tasks)."""
    how = ("its connection closed and nothing answers there now (the scheduler was stopped or killed, or its host is "
           "unreachable)" if gone else "its connection closed mid-run and the client cancelled the run's tasks (the "
           "scheduler restarted, stopped or killed, or the network between them failed)")
    return (f"{what}: lost the dask scheduler at {client.scheduler.address}: {how}; start it (and its workers) again, "
            "then rerun (a run that checkpoints resumes from its newest checkpoint)")


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is dask's cancellation of a task for
    a lost scheduler connection (``FutureCancelledError``, reason ``scheduler-connection-lost``):
    the client says so itself, whatever answers at the scheduler's address a moment later.

    Example:
        >>> from distributed.client import FutureCancelledError
        >>> connection_lost(FutureCancelledError("x", "scheduler-connection-lost")), connection_lost(ValueError())
        (True, False)
    """
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if getattr(e, "reason", None) == "scheduler-connection-lost":
            return True
        e = e.__cause__ or e.__context__
    return False


@contextlib.contextmanager
def frozen_worker_watchdog(client: Client | None, what: str, poll_s: float = 1.0) -> Iterator[None]:
    """While inside, a thread asks the scheduler every ``poll_s`` for a worker silent past
    :func:`worker_silence_s` with a task; on finding one it cancels the client's futures
    (the compute blocked on it raises) and the block raises one
    :class:`~fbrapids.errors.ClusterError` (:func:`silence_message`).  Planning's computes
    included, not only the stream's partitions.  A scheduler lost meanwhile
    (:func:`scheduler_lost`) is found the same way: the client is closed at once (the
    compute waiting on it raises, instead of the client's own ~30 s of retries) and the block
    raises one ClusterError naming the scheduler's address (:func:`lost_scheduler_message`).
    ``client`` None: a no-op."""
    if client is None:
        yield
        return
    import threading

    found: list[str] = []
    done = threading.Event()

    def watch() -> None:
        from distributed import Future

        while not done.wait(poll_s):
            if scheduler_lost(client):
                found.append(lost_scheduler_message(what, client))
                # the client would log its own failure to reconnect as it closes: this run's line says it
                logging.getLogger("distributed.client").setLevel(logging.CRITICAL)
                with contextlib.suppress(Exception):
                    client.close(timeout=10)
                return
            try:
                silent = silent_workers(client, worker_silence_s())
            except Exception:  # noqa: BLE001 - the scheduler busy or gone: the run's own calls say so
                continue
            if silent:
                found.append(silence_message(what, client, silent))
                log.error("%s", found[0])
                with contextlib.suppress(Exception):
                    client.cancel([Future(k, client) for k in list(client.futures)], force=True)
                return

    thread = threading.Thread(target=watch, daemon=True, name="fbrapids-worker-watchdog")
    client_log = logging.getLogger("distributed.client")
    level = client_log.level
    thread.start()
    try:
        yield
    except BaseException as exc:
        if not found and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            # the compute failed first (its futures cancelled): the scheduler gone, or the client's word for it
            gone = scheduler_lost(client)
            if gone or connection_lost(exc):
                found.append(lost_scheduler_message(what, client, gone))
        if found:
            raise ClusterError(found[0]) from exc
        raise
    finally:
        done.set()
        thread.join(poll_s + 15)
        client_log.setLevel(level)
    if found:
        raise ClusterError(found[0])


def stalled_workers(client: Client, keys: Iterable[Key] | None = None) -> list[str]:
    """The workers processing a task now (of ``keys`` when given, else any), each with how
    long ago the scheduler last heard from it: ``"tcp://127.0.0.1:4242 (worker 1, last heard
    63 s ago)"``.  A frozen worker (stopped, swapping) stops its heartbeats."""
    wanted = None if keys is None else {str(k) for k in keys}
    info = client.scheduler_info().get("workers", {})
    now = time.time()
    out = []
    for addr, tasks in client.processing().items():
        if not tasks or (wanted is not None and not wanted & {str(t) for t in tasks}):
            continue
        w = info.get(addr, {})
        heard = now - w["last_seen"] if "last_seen" in w else float("nan")
        out.append(f"{addr} (worker {w.get('name', '?')}, {len(tasks)} task(s), last heard {heard:.0f} s ago)")
    return out


def result_or_error(client: Client, future: Future, what: str, poll_s: float = 1.0) -> object:
    """``future.result()``, but a :class:`~fbrapids.errors.ClusterError` naming the scheduler
    and ``what`` (e.g. ``"partition 3"``) once the cluster has had no worker for
    :func:`worker_wait_s` seconds (every worker killed or gone), instead of waiting for ever.
    Workers that come back within the wait (a nanny restarting them) let it finish.

    A partition that takes longer than :func:`partition_warn_s` is never a silent stall: a
    warning names the workers processing tasks and when each was last heard from (a frozen
    worker stops its heartbeats), every period; past :func:`partition_deadline_s` (when set)
    it is a ClusterError naming them.  A worker busy with a task and unheard for
    :func:`worker_silence_s` (default 120 s) ends it at once: a ClusterError naming the
    worker and what to do (:func:`silence_message`)."""
    from distributed import TimeoutError as DaskTimeout

    alone_since: float | None = None
    started = time.monotonic()
    warn_every, deadline = partition_warn_s(), partition_deadline_s()
    next_warning = started + warn_every
    while True:
        try:
            return future.result(timeout=poll_s)
        except (DaskTimeout, TimeoutError):
            pass
        now = time.monotonic()
        silent = silent_workers(client, worker_silence_s())
        if silent:
            raise ClusterError(silence_message(what, client, silent))
        if now >= next_warning or (deadline is not None and now - started >= deadline):
            busy = stalled_workers(client) or ["no worker is processing a task of it (waiting for data or a worker)"]
            if deadline is not None and now - started >= deadline:
                raise ClusterError(f"{what}: not computed within {deadline:g} s (dask config fbrapids.partition-deadline)"
                                   f"; on the scheduler {client.scheduler.address}: {'; '.join(busy)}")
            log.warning("%s: still computing after %.0f s; on the scheduler %s: %s. A frozen worker stops its "
                        "heartbeats; dask drops it after distributed.scheduler.worker-ttl and reruns its tasks "
                        "(dask config fbrapids.partition-deadline fails the run instead)", what, now - started,
                        client.scheduler.address, "; ".join(busy))
            next_warning = now + warn_every
        if client.scheduler_info().get("workers"):
            alone_since = None
            continue
        alone_since = alone_since if alone_since is not None else now
        if now - alone_since >= worker_wait_s():
            raise ClusterError(f"{what}: the scheduler {client.scheduler.address} has had no worker for "
                               f"{now - alone_since:.0f} s (every worker died or left); start workers for it, or "
                               "raise dask config 'fbrapids.worker-wait'")


def require_workers(client: Client, what: str) -> None:
    """Return once the cluster has a worker; a :class:`~fbrapids.errors.ClusterError` naming
    the scheduler and ``what`` after :func:`worker_wait_s` seconds without one."""
    if client.scheduler_info().get("workers"):
        return
    wait = worker_wait_s()
    log.warning("the scheduler %s has no worker; waiting up to %g s for one", client.scheduler.address, wait)
    try:
        client.wait_for_workers(1, timeout=wait)
    except (TimeoutError, OSError) as exc:
        raise ClusterError(f"{what}: the scheduler {client.scheduler.address} has had no worker for {wait:g} s; "
                           "start workers for it, or raise dask config 'fbrapids.worker-wait'") from exc


def _tagged(read: Callable[[], dict[str, int]]) -> dict[str, object]:
    return {"pid": os.getpid(), "counters": read()}


class WorkerCounters:
    """Counters kept in worker processes (kernel launches, say), summed over every worker
    process seen, so that a worker restarted (new process, counters at zero) or lost does
    not take its counts with it.  :meth:`poll` after each unit of work; :meth:`snapshots`
    at the end.

    Example:
        >>> wc = WorkerCounters(None, dict)  # doctest: +SKIP
    """

    def __init__(self, client: Client, read: Callable[[], dict[str, int]]) -> None:
        self.client, self.read = client, read
        self._last: dict[tuple[str, int], dict[str, int]] = {}

    def poll(self) -> None:
        """Read every live worker's counters (keyed by address and process id)."""
        for addr, got in self.client.run(functools.partial(_tagged, self.read)).items():
            self._last[(addr, got["pid"])] = got["counters"]

    def snapshots(self) -> list[dict[str, int]]:
        """The latest counters of every worker process seen (polling once more first)."""
        with contextlib.suppress(OSError, TimeoutError):
            self.poll()
        return list(self._last.values())


def get_client(address: str | None = None, n_workers: int | None = None, threads_per_worker: int = 1,
               backend: str | None = None, **cluster_kwargs: object) -> tuple[Client, bool]:
    """``(client, owned)``: a client to ``address``, else a new local cluster (``owned`` True;
    the other arguments are :func:`local_cluster`'s).

    Example:
        >>> client, owned = get_client(None, n_workers=1)  # doctest: +SKIP
    """
    if address:
        return connect(address), False
    return local_cluster(n_workers, threads_per_worker, backend, **cluster_kwargs), True


def close_client(client: Client) -> None:
    """Close a client, and its cluster when it was a local one we started."""
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()
