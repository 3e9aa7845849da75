"""Independent pieces of a training step run side by side on the CPU's cores, each on one
intra-op thread: :func:`map_on_cores`.

A trial's arms train in chunks (:func:`~fbrapids.trainers.arms_batched.arm_chunks`), and
each chunk's dense forward and backward reads and writes only its own tensors: its bags'
leaf, its slices of the stacked parameters, its losses.  Run one after another on torch's
intra-op threads, every matmul, ReLU and dot pass of a chunk is split over the cores while
all that lies between them (Python, autograd's engine, the small ops) runs on one: in the
10-candidate trial on a 2-core AMD EPYC the second core worked under half the time.
:func:`map_on_cores` runs the chunks on as many threads as torch has intra-op threads (the
caller's and pool workers), each chunk on one thread: the whole of each core works on a
chunk.  Each chunk's numbers do not depend on which thread ran it (every op runs on one),
and the results come back in the chunks' order.

Measured on that trial (2 cores, 22 and 11 arms a pass, the steps alternated in pairs
between the two ways within one run, medians; two runs): 22 arms 227 -> 200 and 202 -> 186 ms
a step, 11 arms 107 -> 101 and 94 -> 90 ms; the trial's predictions, deltas and verdicts the
same bits.

torch's intra-op thread count is one setting of the process (``torch.set_num_threads``):
:func:`map_on_cores` sets it to 1 while the pieces run and puts it back after every call, an
error's included.

Example:
    >>> map_on_cores(lambda x: x * x, [1, 2, 3, 4], threads=2)
    [1, 4, 9, 16]
    >>> map_on_cores(lambda x: torch.get_num_threads(), [0, 1], threads=2)  # each piece on one thread
    [1, 1]
    >>> with torch.no_grad():
    ...     map_on_cores(lambda x: torch.is_grad_enabled(), [0, 1], threads=2)
    [False, False]
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar, cast

import torch

T = TypeVar("T")
R = TypeVar("R")

_pool: ThreadPoolExecutor | None = None
_pool_workers = 0
_pool_lock = threading.Lock()


def _workers(n: int) -> ThreadPoolExecutor:
    """The process's pool of at least ``n`` worker threads (made, or remade larger, once)."""
    global _pool, _pool_workers
    with _pool_lock:
        if _pool is None or _pool_workers < n:
            old = _pool
            _pool, _pool_workers = ThreadPoolExecutor(max_workers=n, thread_name_prefix="fbrapids-chunks"), n
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def map_on_cores(fn: Callable[[T], R], items: Sequence[T], threads: int | None = None) -> list[R]:
    """``[fn(x) for x in items]``, the calls spread over ``threads`` threads (default torch's
    intra-op count): this one and ``threads - 1`` pool workers each take the next item until
    none is left, every call with one intra-op thread.  One thread or one item: the calls
    run here, one after another, on the intra-op threads as they are.  An exception is
    raised once every call has ended, the first item's that raised.  Each call runs under the
    caller's grad mode (torch keeps it per thread)."""
    threads = torch.get_num_threads() if threads is None else int(threads)
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    before = torch.get_num_threads()
    results: list[R | None] = [None] * len(items)
    errors: list[BaseException | None] = [None] * len(items)
    order = itertools.count()  # (next() on it is atomic under the GIL)
    grad = torch.is_grad_enabled()  # (thread-local in torch: each call runs under the caller's)

    def take() -> None:
        torch.set_num_threads(1)  # (a pool thread keeps its own count from its first op: set it each time)
        while (k := next(order)) < len(items):
            try:
                with torch.set_grad_enabled(grad):
                    results[k] = fn(items[k])
            except BaseException as e:  # noqa: BLE001  (re-raised below, in order)
                errors[k] = e

    helpers: list[Future[None]] = []
    torch.set_num_threads(1)
    try:
        pool = _workers(threads - 1)
        helpers = [pool.submit(take) for _ in range(min(threads, len(items)) - 1)]
        take()
    finally:
        for h in helpers:  # (every helper done before the count is put back: none sets it after)
            h.exception()
        torch.set_num_threads(before)
    for h in helpers:
        if (raised := h.exception()) is not None:
            raise raised
    for e in errors:
        if e is not None:
            raise e
    return cast("list[R]", results)  # (every item's result is set: no call raised)
