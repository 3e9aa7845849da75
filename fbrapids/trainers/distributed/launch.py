"""Starting ranks: under ``torchrun`` (:func:`init_from_env`) or as local processes
(:func:`spawn`, what ``fbrapids demo --nproc N`` uses).

:func:`spawn` starts ``nproc`` processes with ``torch.multiprocessing`` (the *spawn* start
method), each joining one process group and running ``fn(rank, world, *args)``; it returns
each rank's return value.

**Devices and the backend** (:func:`place_ranks`).  The ranks train where the device rule
(:func:`fbrapids.trainers.device.resolve_device`) says.  On CUDA, rank ``r`` gets device
``cuda:{r % device_count}`` (set as the current device and as ``$FBRAPIDS_DEVICE`` in the
rank, so every thread of it and every store it makes use that device), and the process
group is NCCL, which needs one GPU per rank: more ranks than visible devices are refused in
one line before any rank starts, unless gloo is asked for (``backend="gloo"``, ``fbrapids
demo --dist-backend gloo``), which lets ranks share devices.  On the CPU the group is gloo.  When a rank fails (an exception, or killed), ``torch.multiprocessing`` stops the
others and :func:`spawn` raises a :class:`~fbrapids.errors.DistributedError` naming the
rank; a rank blocked in a collective with a dead peer fails within ``collective_timeout_s``
(the process group's timeout), and the whole launch within ``timeout_s``.

**Heartbeats.**  Every rank touches a file of its own every :data:`HEARTBEAT_S` seconds
from a thread of its own; the launcher watches them.  A rank silent for
``heartbeat_timeout_s`` (default 30 s, less than the collectives' timeout) while the
kernel reports it stopped (SIGSTOP), or for four times that in any state (frozen), is
named as the one that stopped responding, with its process state, and every rank is
stopped: the healthy ranks waiting for it in a collective are not blamed.  When a rank
fails while another one has been silent for a few heartbeats, the silent one is named
first.  The heartbeats go through shared memory, not files: a burst of fsyncs on a busy
disk does not silence a healthy rank.

Example:
    >>> spawn(world_of, 2)  # doctest: +SKIP
    [(0, 2), (1, 2)]
"""

from __future__ import annotations

import datetime
import os
import pickle
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fbrapids.errors import DistributedError

__all__ = ["init_rank", "init_from_env", "spawn", "world_of", "default_backend", "place_ranks", "RankPlacement",
           "HEARTBEAT_S", "BACKENDS"]

#: seconds between two heartbeats of a rank
HEARTBEAT_S = 0.5


#: the process group backends a launch may be asked for
BACKENDS = ("gloo", "nccl")


def default_backend() -> str:
    """The backend the device rule gives: ``"nccl"`` when the ranks train on CUDA
    (:func:`~fbrapids.trainers.device.resolve_device`), else ``"gloo"``."""
    from fbrapids.trainers.device import resolve_device

    return "nccl" if resolve_device().type == "cuda" else "gloo"


@dataclass(frozen=True)
class RankPlacement:
    """Where local ranks train: the process group ``backend`` and each rank's device
    (``"cpu"`` or ``"cuda:i"``)."""

    backend: str
    devices: tuple[str, ...]


def place_ranks(nproc: int, backend: str | None, device_type: str, device_count: int) -> RankPlacement:
    """The backend and devices of ``nproc`` local ranks whose device rule says
    ``device_type`` (``"cuda"`` / ``"cpu"``) on a machine with ``device_count`` visible GPUs.

    ``backend`` None follows the device: NCCL on CUDA (one GPU per rank: more ranks than
    devices is a :class:`~fbrapids.errors.DistributedError`), gloo on the CPU.  gloo on CUDA
    lets ranks share devices; NCCL without CUDA is refused.

    Example:
        >>> place_ranks(2, None, "cuda", 2)
        RankPlacement(backend='nccl', devices=('cuda:0', 'cuda:1'))
        >>> place_ranks(3, "gloo", "cuda", 2).devices
        ('cuda:0', 'cuda:1', 'cuda:0')
        >>> place_ranks(2, None, "cpu", 0)
        RankPlacement(backend='gloo', devices=('cpu', 'cpu'))
    """
    if backend is not None and backend not in BACKENDS:
        raise DistributedError(f"process group backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if device_type != "cuda":
        if backend == "nccl":
            raise DistributedError(f"NCCL needs a CUDA device per rank, but the ranks train on the {device_type} "
                                   "(the device rule: FBRAPIDS_DEVICE, the backend, torch's CUDA); use gloo")
        return RankPlacement("gloo", ("cpu",) * nproc)
    if device_count < 1:
        raise DistributedError("the ranks are to train on CUDA, but no CUDA device is visible")
    backend = backend or "nccl"
    if backend == "nccl" and nproc > device_count:
        where = os.environ.get("CUDA_VISIBLE_DEVICES")
        scope = f" (CUDA_VISIBLE_DEVICES={where!r})" if where is not None else ""
        raise DistributedError(f"{nproc} ranks on NCCL need {nproc} GPUs, one per rank, and {device_count} "
                               f"{'is' if device_count == 1 else 'are'} visible{scope}: run at most {device_count} "
                               "ranks, or let ranks share GPUs with the gloo backend (--dist-backend gloo)")
    return RankPlacement(backend, tuple(f"cuda:{r % device_count}" for r in range(nproc)))


def use_device(device: str | None) -> None:
    """Make ``device`` (``"cuda:i"``) this rank's: torch's current device and
    ``$FBRAPIDS_DEVICE`` (the device rule of every thread and store of the process);
    ``"cpu"`` / None leave both as they are."""
    if device is None or not device.startswith("cuda"):
        return
    from fbrapids.trainers.device import ENV_VAR

    os.environ[ENV_VAR] = device
    torch.cuda.set_device(torch.device(device))


def init_rank(rank: int, world: int, init_method: str, backend: str | None = None,
              collective_timeout_s: float = 120.0, device: str | None = None) -> None:
    """Join the process group as ``rank`` of ``world`` on ``device`` (:func:`place_ranks`;
    None: NCCL puts the rank on GPU ``rank % device_count``)."""
    backend = backend or default_backend()
    if device is None and backend == "nccl":
        device = f"cuda:{rank % torch.cuda.device_count()}"
    use_device(device)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=collective_timeout_s))


def init_from_env(backend: str | None = None, collective_timeout_s: float = 120.0) -> tuple[int, int]:
    """Join the process group ``torchrun`` describes (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``; NCCL on GPU ``LOCAL_RANK``); returns (rank, world)."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise DistributedError(f"not launched by torchrun: {', '.join(missing)} not set (run `torchrun "
                               "--nproc-per-node N ...`, or use fbrapids.trainers.distributed.launch.spawn)")
    backend = backend or default_backend()
    if backend == "nccl":
        local, count = int(os.environ.get("LOCAL_RANK", 0)), torch.cuda.device_count()
        if local >= count:
            raise DistributedError(f"local rank {local} on NCCL needs GPU {local}, and {count} "
                                   f"{'is' if count == 1 else 'are'} visible: start at most {count} ranks per "
                                   "node (torchrun --nproc-per-node), one per GPU")
        use_device(f"cuda:{local}")
    dist.init_process_group(backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=collective_timeout_s))
    return dist.get_rank(), dist.get_world_size()


def world_of(rank: int, world: int) -> tuple[int, int]:
    """``(rank, world)`` as the process group sees them (a launch smoke test)."""
    return dist.get_rank(), dist.get_world_size()


def _beat(beats: Any, rank: int) -> None:
    """Write the monotonic clock into ``beats[rank]`` (shared memory: no file system that a
    burst of fsyncs could stall) every :data:`HEARTBEAT_S` seconds, for ever (a daemon thread)."""
    while True:
        beats[rank] = time.monotonic()
        time.sleep(HEARTBEAT_S)


def _entry(rank: int, fn: Callable[..., Any], world: int, init_method: str, placement: RankPlacement,
           collective_timeout_s: float, out: str, args: Sequence[Any], beats: Any = None) -> None:
    if beats is not None:
        threading.Thread(target=_beat, args=(beats, rank), daemon=True, name=f"fbrapids-heartbeat-{rank}").start()
    torch.set_num_threads(1)
    init_rank(rank, world, init_method, placement.backend, collective_timeout_s, placement.devices[rank])
    try:
        value = fn(rank, world, *args)
        with open(os.path.join(out, f"rank-{rank}.pkl"), "wb") as f:
            pickle.dump(value, f)
    finally:
        dist.destroy_process_group()


def process_state(pid: int) -> str:
    """The state of process ``pid`` as Linux's ``/proc/<pid>/stat`` tells it (``"stopped"``
    for a SIGSTOPped one, ``"sleeping"``, ``"running"``, ...), or ``"unknown"``.

    Example:
        >>> process_state(os.getpid())
        'running'
    """
    names = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped", "t": "stopped (traced)",
             "Z": "a zombie"}
    try:
        with open(f"/proc/{pid}/stat") as f:
            return names.get(f.read().rsplit(")", 1)[1].split()[0], "unknown")
    except (OSError, IndexError):
        return "unknown"


def _silent(ctx: Any, beats: Any, limit: float) -> list[tuple[int, int, float, str]]:
    """(rank, pid, seconds, process state) of every live rank whose last heartbeat is older
    than ``limit`` (a rank that has not beaten yet is still starting: not judged)."""
    now, out = time.monotonic(), []
    for r, p in enumerate(ctx.processes):
        age = now - beats[r] if beats[r] > 0 else 0.0
        if age > limit and p.is_alive():
            out.append((r, p.pid, age, process_state(p.pid)))
    return out


def _stop_all(ctx: Any) -> None:
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
    for p in ctx.processes:
        p.join(5)


def _silence_error(silent: list[tuple[int, int, float, str]], then: str = "") -> DistributedError:
    r, pid, age, state = max(silent, key=lambda x: x[2])
    return DistributedError(f"rank {r} (pid {pid}, {state}) stopped responding: no heartbeat for "
                            f"{age:.0f} s{then}; every rank stopped (a stopped rank: look for what sent it SIGSTOP; "
                            "a frozen one: its stack, e.g. py-spy dump --pid)")


def local_placement(nproc: int, backend: str | None) -> RankPlacement:
    """:func:`place_ranks` for this machine: the device rule's device type and torch's
    count of visible CUDA devices."""
    from fbrapids.trainers.device import resolve_device

    device_type = resolve_device().type
    return place_ranks(nproc, backend, device_type, torch.cuda.device_count() if device_type == "cuda" else 0)


def spawn(fn: Callable[..., Any], nproc: int, args: Sequence[Any] = (), backend: str | None = "gloo",
          timeout_s: float = 600.0, collective_timeout_s: float = 60.0,
          heartbeat_timeout_s: float = 30.0, placement: RankPlacement | None = None) -> list[Any]:
    """Run ``fn(rank, nproc, *args)`` on ``nproc`` local ranks; their return values, in
    rank order.  ``fn`` must be importable (a module-level function).  ``backend``: the
    process group's (None: as the device rule says); ``placement``: the ranks' devices and
    backend decided already (:func:`place_ranks`; default :func:`local_placement`), refused
    before any rank starts when impossible.  A failing rank is a
    :class:`~fbrapids.errors.DistributedError` naming it, the others stopped; so is a rank
    without a heartbeat for ``heartbeat_timeout_s`` (module docstring)."""
    if nproc < 1:
        raise DistributedError(f"nproc must be >= 1, got {nproc}")
    placement = placement or local_placement(nproc, backend)
    with tempfile.TemporaryDirectory(prefix="fbrapids-ranks-") as tmp:
        init = "file://" + os.path.join(tmp, "rendezvous")
        beats = mp.get_context("spawn").RawArray("d", nproc)
        ctx = mp.start_processes(_entry, args=(fn, nproc, init, placement, collective_timeout_s, tmp, tuple(args),
                                               beats), nprocs=nproc, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        quiet: list[tuple[int, int, float, str]] = []  # ranks silent a while at the last look (before a failure)
        try:
            while True:
                quiet = _silent(ctx, beats, 10 * HEARTBEAT_S)
                # a stopped process (SIGSTOP) past the timeout; any other silent one (frozen) past 4 times it
                silent = [q for q in quiet if q[2] > heartbeat_timeout_s * (1 if q[3].startswith("stopped") else 4)]
                if silent:
                    _stop_all(ctx)
                    raise _silence_error(silent)
                if ctx.join(timeout=0.5):
                    break
                if time.monotonic() > deadline:
                    _stop_all(ctx)
                    raise DistributedError(f"{nproc} ranks still running after {timeout_s:.0f} s; all stopped")
        except mp.ProcessRaisedException as exc:
            _stop_all(ctx)
            last = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
            failed = f"rank {exc.error_index} (pid {exc.error_pid}) failed: {last[-1] if last else exc}"
            # stopped by a signal, or silent past the timeout (a busy rank importing or in a long C
            # call may skip a few beats: not a culprit)
            quiet = [q for q in quiet if q[0] != exc.error_index
                     and (q[3].startswith("stopped") or q[2] > heartbeat_timeout_s)]
            if quiet:
                raise _silence_error(quiet, f", and then {failed}") from exc
            raise DistributedError(f"{failed}; every rank stopped") from exc
        except mp.ProcessExitedException as exc:
            _stop_all(ctx)
            raise DistributedError(f"rank {exc.error_index} (pid {exc.error_pid}) died ({exc}); every rank "
                                   "stopped") from exc
        except BaseException:  # interrupted (Ctrl-C, a caller's timeout): no rank is left running
            _stop_all(ctx)
            raise
        out = []
        for r in range(nproc):
            path = Path(tmp) / f"rank-{r}.pkl"
            with open(path, "rb") as f:
                out.append(pickle.load(f))
        return out
