"""The collectives of one step, counted: one ``all_gather`` of a small int64 vector per rank
(per-destination id counts and flags), then ``all_to_all_single`` exchanges of flat
buffers (ids, rows, row gradients), each fused across every table.

:class:`Exchange` moves tensors to the communication device (the CPU for gloo, the rank's
GPU for NCCL) and back, and keeps counts in :attr:`Exchange.stats`: collectives called,
bytes sent to other ranks (and to itself), seconds spent inside them.

Example (a group of one process):
    >>> import os, tempfile, numpy as np, torch, torch.distributed as dist
    >>> dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
    >>> ex = Exchange()
    >>> ex.all_gather_counts(np.array([3, 1])).tolist()
    [[3, 1]]
    >>> ex.all_to_all(torch.arange(4), [4], [4]).tolist(), ex.stats["all_to_all_single"]
    ([0, 1, 2, 3], 1)
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist


def comm_device(backend: str | None = None) -> torch.device:
    """Where collective buffers live: the current CUDA device for NCCL, else the CPU."""
    backend = backend or dist.get_backend()
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Exchange:
    """Counted collectives over ``group`` (default: the world)."""

    def __init__(self, group: dist.ProcessGroup | None = None, shares: "Exchange | None" = None,
                 seconds_key: str = "seconds") -> None:
        """``shares``: count into that exchange's :attr:`stats` (under one lock), the time
        spent under ``seconds_key`` (a thread's overlapped exchanges apart from the step's)."""
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.device = comm_device(dist.get_backend(group))
        self.stats: dict[str, float] = shares.stats if shares is not None else {
            "all_gather": 0, "all_to_all_single": 0, "bytes_to_others": 0, "bytes_to_self": 0, "seconds": 0.0}
        self.stats.setdefault(seconds_key, 0.0)
        self.lock: threading.Lock = shares.lock if shares is not None else threading.Lock()
        self.seconds_key = seconds_key

    def _count(self, **add: float) -> None:
        with self.lock:
            for k, v in add.items():
                self.stats[k] += v

    def all_gather_counts(self, row: np.ndarray) -> np.ndarray:
        """Every rank's int64 ``row`` (all of one length), as ``[world, len(row)]``."""
        t0 = time.perf_counter()
        mine = torch.from_numpy(np.ascontiguousarray(row, dtype=np.int64)).to(self.device)
        out = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(out, mine, group=self.group)
        got = torch.stack(out).cpu().numpy()
        self._count(all_gather=1, bytes_to_others=mine.numel() * 8 * (self.world - 1),
                    **{self.seconds_key: time.perf_counter() - t0})
        return got

    def all_to_all(self, send: torch.Tensor, send_splits: Sequence[int], recv_splits: Sequence[int]) -> torch.Tensor:
        """``all_to_all_single`` of a flat buffer: ``send_splits[d]`` elements go to rank ``d``,
        ``recv_splits[s]`` come from rank ``s``; returns the received buffer on the CPU."""
        t0 = time.perf_counter()
        send = send.to(self.device).contiguous()
        out = torch.empty(int(sum(recv_splits)), dtype=send.dtype, device=self.device)
        dist.all_to_all_single(out, send, output_split_sizes=[int(s) for s in recv_splits],
                               input_split_sizes=[int(s) for s in send_splits], group=self.group)
        size = send.element_size()
        mine = int(send_splits[self.rank]) * size
        out = out.cpu()
        self._count(all_to_all_single=1, bytes_to_self=mine, bytes_to_others=send.numel() * size - mine,
                    **{self.seconds_key: time.perf_counter() - t0})
        return out
