"""One pass over a dask frame's partitions: shared upstream work once, bounded memory.

Computing ``frame.to_delayed()[i]`` one by one re-runs, for every partition, the tasks it
shares with other partitions: a broadcast join's build task, a shuffle, a read task whose
rows are split between two output partitions.  That costs partitions x rows.  Computing
the whole frame at once holds every partition in memory.  :func:`iter_partitions` does
neither:

* the graph is optimised ONCE per pass (``to_delayed``), and a :class:`PassPlan` finds, for
  every task, the first and last output partition that needs it;
* partitions are computed in order, ``window`` at a time; a task needed by several
  partitions is computed with the first of them, and its result is kept only while a task
  still to run takes it as an input, dropped as soon as the last such task has run (so each
  upstream task runs once per pass, and what is held is the frontier between what has run
  and what has not: a dictionary's hash table, a shuffle's store and barrier, the slice of a
  read shared by two partitions; never the upstream partitions a shuffle has consumed);
* with the local scheduler (threads, sync) each window is one call of that scheduler on
  the window's slice of the graph, with the kept results in it as data;
* on a distributed ``Client`` (the scheduler in force) the window's partitions are futures,
  at most ``window`` outstanding; shared tasks are held on the cluster as futures until
  their last consumer is submitted and done, so the scheduler never recomputes them (a P2P
  shuffle's barrier included).

Memory: at most ``window`` output partitions in flight or held, plus the shared results
still needed (a dictionary's hash table; the slices of a partition that spans two; a
shuffle's store, which spills to disk), whatever the rows.  A shuffle's barrier needs every
input partition, and all of them were once "shared"; holding each until the last output
partition held the whole input in memory (a 64M-row run was killed at 22.5 GB).
``stats["held_bytes"]`` is the most bytes the pass held at once (:func:`dask.sizeof.sizeof`
of the kept results and the window's partitions), ``stats["shuffle_ram_bytes"]`` the most a
disk shuffle's stores held in RAM (dask's partd buffer: up to 1 GB each, then its files).

Example:
    >>> import pandas as pd, dask.dataframe as dd
    >>> frame = dd.from_pandas(pd.DataFrame({"a": range(6)}), npartitions=3)
    >>> [len(p) for p in iter_partitions(frame)]
    [2, 2, 2]
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Container, Iterable, Iterator, Sequence, cast

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from dask._task_spec import GraphNode
    from dask.typing import Key
    from distributed import Client, Future

    from fbrapids.frames.backend import EagerFrame, FrameLike

log = logging.getLogger(__name__)


@dataclass
class PassPlan:
    """For each task key: the tasks it needs, and the first and last output needing it."""

    graph: dict[Key, GraphNode]
    outputs: list[Key]
    first_use: dict[Key, int] = field(default_factory=dict)
    last_use: dict[Key, int] = field(default_factory=dict)
    #: per task: how many tasks of the pass take it as an input and have not run yet
    waiting: dict[Key, int] = field(default_factory=dict)

    @classmethod
    def of(cls, graph: dict[Key, GraphNode], outputs: list[Key], per_partition: int = 1) -> "PassPlan":
        """The plan of ``outputs``, ``per_partition`` consecutive ones per partition (two: a
        frame's partition and the one computed beside it); first and last use count partitions."""
        plan = cls(graph, outputs)
        for i, key in enumerate(outputs):
            for k in plan.closure(key, stop=()):
                plan.first_use.setdefault(k, i // per_partition)
                plan.last_use[k] = i // per_partition
        for k in plan.first_use:
            plan.waiting.setdefault(k, 0)
            for d in plan.dependencies(k):
                if d in plan.first_use:
                    plan.waiting[d] = plan.waiting.get(d, 0) + 1
        return plan

    def ran(self, keys: Iterable[Key]) -> None:
        """Record that ``keys`` have run: their inputs wait on them no more."""
        for k in keys:
            for d in self.dependencies(k):
                if d in self.waiting:
                    self.waiting[d] -= 1

    def still_needed(self, key: Key) -> bool:
        """Whether a task that has not run yet takes ``key``'s result as an input (so a
        later partition's closure, stopping at kept results, reaches ``key``)."""
        return self.waiting.get(key, 0) > 0

    def dependencies(self, key: Key) -> frozenset[Key]:
        return self.graph[key].dependencies

    def closure(self, key: Key, stop: Container[Key]) -> list[Key]:
        """``key`` and every task it needs, not looking past the keys in ``stop``, nor past
        keys outside the graph (results a distributed cluster already holds: a persisted
        collection's futures)."""
        seen: dict[Key, None] = {}
        todo = [key]
        while todo:
            k = todo.pop()
            if k in seen or k not in self.graph:
                continue
            seen[k] = None
            if k not in stop:
                todo.extend(self.dependencies(k))
        return list(seen)

    def shared(self, key: Key) -> bool:
        """Whether more than one output partition needs ``key``."""
        return self.first_use[key] != self.last_use[key]

    @property
    def shared_tasks(self) -> int:
        return sum(1 for k in self.first_use if self.shared(k))


def _client_of(get: Callable[..., object] | None) -> Client | None:
    owner = getattr(get, "__self__", None)
    return owner if type(owner).__name__ == "Client" else None


def iter_partitions(frame: FrameLike, window: int = 2, stats: dict[str, int] | None = None,
                    beside: KeptPartitions | None = None) -> Iterator[EagerFrame]:
    """The partitions of dask ``frame``, in order, computed as one pass (see the module doc).

    Args:
        frame: a dask (or dask-cudf) DataFrame (an eager one is an ArgumentError).
        window: partitions computed together (local scheduler) or outstanding as futures.
        stats: if given, filled with ``partitions``, ``tasks`` and ``shared_tasks``.
        beside: another frame's partitions to compute with these, partition ``i`` with
            partition ``i`` (the tasks they share, such as every step before a split, run
            once), handed to it to keep (:class:`KeptPartitions`); only while it still wants
            some, and only when the two frames have as many partitions.

    Example:
        >>> import pandas as pd, dask.dataframe as dd
        >>> frame = dd.from_pandas(pd.DataFrame({"a": range(4)}), npartitions=2)
        >>> s = {}; [p["a"].tolist() for p in iter_partitions(frame, window=1, stats=s)], s["partitions"]
        ([[0, 1], [2, 3]], 2)
    """
    import dask
    from dask._task_spec import convert_legacy_graph

    from fbrapids.errors import ArgumentError
    from fbrapids.frames.backend import is_dask

    if not is_dask(frame):
        raise ArgumentError(f"iter_partitions: a pass over partitions needs a dask frame, got {type(frame).__name__}")
    window = max(1, int(window))
    together = beside is not None and beside.wanted and beside.npartitions == frame.npartitions
    if beside is not None and beside.wanted and not together:
        log.debug("pass over %d partitions: the frame beside has %d, computed in its own pass",
                  frame.npartitions, beside.npartitions)
    if together:
        assert beside is not None
        graph, outputs = _joint_graph(frame, beside.frame)
    else:
        pieces = frame.to_delayed()  # optimises the whole graph once
        graph = convert_legacy_graph(dict(pieces[0].__dask_graph__())) if pieces else {}
        for piece in pieces[1:]:
            if piece.key not in graph:
                graph.update(convert_legacy_graph(dict(piece.__dask_graph__())))
        outputs = [p.key for p in pieces]
    if not outputs:
        return
    get = local_threads(dask.base.get_scheduler(collections=[frame]))
    client = _client_of(get)
    per = 2 if together else 1
    try:
        plan = PassPlan.of(graph, outputs, per_partition=per)
    except KeyError as exc:
        if client is None:
            raise
        from fbrapids.errors import ClusterError

        raise ClusterError(f"pass over {len(outputs) // per} partitions: the scheduler {client.scheduler.address} lost the "
                           f"data of task {exc.args[0]!r} (persisted on workers that died or left); nothing "
                           "can recompute it in this run") from None
    if stats is None:
        stats = {}
    stats.update(partitions=len(outputs) // per, tasks=len(plan.first_use), shared_tasks=plan.shared_tasks,
                 held_bytes=0, shuffle_ram_bytes=0)
    log.debug("pass over %d partitions: %d tasks, %d shared", len(outputs) // per, len(plan.first_use),
              plan.shared_tasks)
    results = _futures_pass(plan, client, window * per) if client is not None else \
        _local_pass(plan, get, window * per, stats)
    if not together:
        yield from results
        return
    assert beside is not None
    for i, part in enumerate(results):
        if i % 2:
            beside.take(i // 2, part)
        else:
            yield part


def local_threads(get: Callable[..., Sequence[object]]) -> Callable[..., Sequence[object]]:
    """dask's threaded scheduler ``get`` told to run on as many threads as the machine has cores
    (``dask.system.CPU_COUNT``, what it uses on the main thread), unless ``num_workers`` or a
    ``pool`` is configured; any other scheduler as it is.  Called from another thread (the
    stream's producer runs every pass of a training run), dask makes a pool of Python's default
    size instead, cores + 4: 6 threads on 2 cores beside the trainer's.  On the demo at 200k
    rows on 2 cores, 5 pairs of runs alternated: 41-56k samples/s (median 50,197) on 2 threads
    against 32-49k (median 36,131) on 6, extraction busy 1.59-2.13 s against 1.99-3.13 s.

    Example:
        >>> import dask, dask.threaded
        >>> local_threads(dask.threaded.get).keywords["num_workers"] == dask.system.CPU_COUNT
        True
        >>> with dask.config.set(num_workers=3):
        ...     local_threads(dask.threaded.get) is dask.threaded.get
        True
    """
    import dask
    import dask.system
    import dask.threaded

    if get is not dask.threaded.get or dask.config.get("num_workers", None) is not None \
            or dask.config.get("pool", None) is not None:
        return get
    return functools.partial(get, num_workers=dask.system.CPU_COUNT)


def _joint_graph(frame: FrameLike, other: FrameLike) -> tuple[dict[Key, GraphNode], list[Key]]:
    """The graph of two frames of as many partitions optimised together, and their output
    keys interleaved (``frame``'s partition 0, ``other``'s 0, ``frame``'s 1, ...).  Optimised
    apart, dask fuses each frame's steps into one task per partition, so the steps the two
    share (every step before a split) would be two tasks, each run; together they are one."""
    from dask._task_spec import convert_legacy_graph
    from dask.base import collections_to_expr

    joint = collections_to_expr([frame, other]).optimize()
    graph = convert_legacy_graph(dict(joint.__dask_graph__()))
    own, beside = joint.__dask_keys__()
    return graph, [k for pair in zip(own, beside) for k in pair]


def _local_pass(plan: PassPlan, get: Callable[..., Sequence[object]], window: int, stats: dict[str, int]
                ) -> Iterator[EagerFrame]:
    from dask._task_spec import DataNode
    from dask.sizeof import sizeof

    kept: dict[Key, object] = {}
    outputs = plan.outputs
    for start in range(0, len(outputs), window):
        batch = outputs[start:start + window]
        sub: dict[Key, GraphNode] = {}
        for key in batch:
            for k in plan.closure(key, stop=kept):
                if k not in sub:
                    sub[k] = DataNode(k, kept[k]) if k in kept else plan.graph[k]
        fresh = [k for k in sub if k not in kept]
        plan.ran(fresh)
        keep = [k for k in fresh if plan.still_needed(k)]
        results = get(sub, list(batch) + keep)
        kept.update(zip(keep, results[len(batch):]))
        for k in [k for k in kept if not plan.still_needed(k)]:
            del kept[k]
        stores = [store_ram(v) for v in kept.values()]
        held = sum(sizeof(v) for v, ram in zip(kept.values(), stores) if ram is None)
        stats["held_bytes"] = max(stats["held_bytes"], held + sum(sizeof(v) for v in results[:len(batch)]))
        stats["shuffle_ram_bytes"] = max(stats["shuffle_ram_bytes"], sum(ram or 0 for ram in stores))
        yield from results[:len(batch)]


def store_ram(value: object) -> int | None:
    """The bytes a disk shuffle's store (partd: dask's ``shuffle(method="disk")``) holds in
    RAM before they spill to its files; None when ``value`` is not such a store.

    Example:
        >>> import pandas as pd
        >>> store_ram(pd.DataFrame({"a": [1]})) is None
        True
    """
    inner = value
    while type(inner).__module__.startswith("partd") and hasattr(inner, "partd"):  # the encoding layers
        inner = inner.partd
    if type(inner).__module__.startswith("partd"):
        ram = getattr(inner, "memory_usage", None)  # a partd.Buffer; 0 for a store straight on its files
        return int(ram) if isinstance(ram, int) else 0
    return None


class KeptPartitions:
    """A dask frame's partitions computed beside a pass over another frame of as many
    partitions (``iter_partitions(other, beside=kept)``: the held-out rows of a partition
    computed with its training rows, every step before the split run once), kept for a later
    pass over this frame (:meth:`partitions`), up to ``budget`` bytes
    (:func:`dask.sizeof.sizeof`).

    That later pass yields the kept partitions, skips those seen to be empty, and computes
    the rest as one pass of their own (:func:`iter_partitions` over ``frame.partitions[...]``):
    those over the budget, and those the other pass never reached (a run resumed after its
    training ended; ``max_steps``).  Its partitions are the frame's own, in order, empty ones
    left out, whichever way each was computed.  A kept partition is handed over once: a
    second pass computes it again.  ``computed_beside`` counts the partitions the other pass
    computed for this frame, ``computed_again`` those this frame's own passes computed,
    ``kept_bytes`` the most kept at once.

    Example:
        >>> import pandas as pd, dask.dataframe as dd
        >>> frame = dd.from_pandas(pd.DataFrame({"a": range(6)}), npartitions=3)
        >>> late = frame.map_partitions(lambda p: p[p["a"] >= 3])
        >>> kept = KeptPartitions(late, budget=1 << 20)
        >>> [len(p) for p in iter_partitions(frame, window=1, beside=kept)], kept.computed_beside
        ([2, 2, 2], 3)
        >>> [p["a"].tolist() for p in kept.partitions()]  # the first partition was empty
        [[3], [4, 5]]
    """

    def __init__(self, frame: FrameLike, budget: int) -> None:
        self.frame = frame
        self.budget = int(budget)
        self.npartitions = int(cast(Any, frame).npartitions)  # (a dask frame)
        self._kept: dict[int, EagerFrame] = {}
        self._empty: set[int] = set()
        self._over: set[int] = set()  #: seen with rows, over the budget: computed again
        self._bytes = 0
        self._lock = threading.Lock()  # the other pass may run on a stream's thread
        self._handing_over = False  # a pass over this frame has begun: nothing more is taken
        self.kept_bytes = 0
        self.computed_beside = 0
        self.computed_again = 0

    @property
    def wanted(self) -> bool:
        """Whether some partition has not been seen (computing it beside saves a pass)."""
        return len(self._kept) + len(self._empty) + len(self._over) < self.npartitions

    def take(self, i: int, part: EagerFrame) -> None:
        """Partition ``i`` of the frame, computed beside another pass: kept while within the
        budget, its emptiness noted, or left to compute again."""
        from dask.sizeof import sizeof

        size = int(sizeof(part)) if len(part) else 0
        with self._lock:
            if self._handing_over or i in self._kept or i in self._empty or i in self._over:
                return  # seen in an earlier pass (another epoch over the other frame), or too late
            self.computed_beside += 1
            if size == 0:
                self._empty.add(i)
            elif self._bytes + size > self.budget:
                self._over.add(i)
            else:
                self._kept[i] = part
                self._bytes += size
                self.kept_bytes = max(self.kept_bytes, self._bytes)

    def partitions(self, window: int = 2, stats: dict[str, int] | None = None) -> Iterator[EagerFrame]:
        """The frame's non-empty partitions in order: the kept ones handed over (and let go),
        the rest computed as one pass (``window`` and ``stats`` as :func:`iter_partitions`'s)."""
        with self._lock:  # what was taken until now is what this pass hands over
            self._handing_over = True
            kept, empty = self._kept, self._empty
            self._kept, self._empty, self._over, self._bytes = {}, set(), set(), 0  # a later pass: every one again
        try:
            todo = [i for i in range(self.npartitions) if i not in kept and i not in empty]
            again = set(todo)
            if stats is not None:
                stats.update(partitions=0, tasks=0, shared_tasks=0, held_bytes=0, shuffle_ram_bytes=0)
            computed = iter_partitions(self.frame.partitions[todo], window=window, stats=stats) if todo else iter(())
            for i in range(self.npartitions):
                if i in kept:
                    yield kept.pop(i)  # let go once handed over
                elif i in again:
                    part = next(computed)
                    self.computed_again += 1
                    yield part
                    del part
        finally:
            with self._lock:
                self._handing_over = False


def _futures_pass(plan: PassPlan, client: Client, window: int) -> Iterator[EagerFrame]:
    from fbrapids.frames.cluster import result_or_error  # a bounded wait when every worker is gone

    held: dict[Key, Future] = {}  # shared key -> Future, released after its last consumer is done
    outstanding: deque[tuple[int, Future]] = deque()
    outputs = plan.outputs

    def submit(i: int) -> None:
        key = outputs[i]
        sub = {k: plan.graph[k] for k in plan.closure(key, stop=held) if k not in held}
        plan.ran(sub)
        keep = [k for k in sub if plan.still_needed(k)]
        futures = client.get(sub, [key] + keep, sync=False)
        held.update(zip(keep, futures[1:]))
        outstanding.append((i, futures[0]))

    nxt = 0
    while nxt < len(outputs) or outstanding:
        while nxt < len(outputs) and len(outstanding) < window:
            submit(nxt)
            nxt += 1
            # a submitted consumer keeps what it needs alive on the scheduler: drop our hold
            # on results no task still to submit takes as an input
            for k in [k for k in held if not plan.still_needed(k)]:
                del held[k]
        i, future = outstanding.popleft()
        part = result_or_error(client, future, f"partition {i} of {len(outputs)}")
        del future
        yield part
