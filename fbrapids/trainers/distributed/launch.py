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

**Heartbeats.**  Every rank writes the time into its own slot of shared memory every
:data:`HEARTBEAT_S` seconds from a thread of its own; the launcher watches them.  A rank silent for
``heartbeat_timeout_s`` (default 30 s, less than the collectives' timeout) while the
kernel reports it stopped (SIGSTOP), or for four times that in any state (frozen), is
named as the one that stopped responding, with its process state, and every rank is
stopped: the healthy ranks waiting for it in a collective are not blamed.  A rank that
has not sent its first heartbeat is silent since its launch: one stopped while it starts
is named within the same limit.  When a rank
fails while another one has been silent for a few heartbeats, the silent one is named
first.  The heartbeats go through shared memory, not files: a burst of fsyncs on a busy
disk does not silence a healthy rank.

Example:
    >>> spawn(world_of, 2)  # doctest: +SKIP
    [(0, 2), (1, 2)]
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import os
import pickle
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence, TypeAlias, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fbrapids.errors import DistributedError

#: every rank's last heartbeat (the monotonic clock; 0: none yet), in shared memory
Beats: TypeAlias = "ctypes.Array[ctypes.c_double]"
_T = TypeVar("_T")

__all__ = ["init_rank", "init_from_env", "spawn", "world_of", "default_backend", "place_ranks", "RankPlacement",
           "HEARTBEAT_S", "BACKENDS"]

#: seconds between two heartbeats of a rank
HEARTBEAT_S = 0.5
#: seconds a running rank may take to send its first heartbeat (starting Python and importing torch on a
#: loaded machine) before it is called frozen; a stopped one is named after the heartbeat timeout
STARTUP_S = 120.0


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


def _beat(beats: Beats, rank: int) -> None:
    """Write the monotonic clock into ``beats[rank]`` (shared memory: no file system that a
    burst of fsyncs could stall) every :data:`HEARTBEAT_S` seconds, for ever (a daemon thread)."""
    while True:
        beats[rank] = time.monotonic()
        time.sleep(HEARTBEAT_S)


def _entry(rank: int, fn: Callable[..., object], world: int, init_method: str, placement: RankPlacement,
           collective_timeout_s: float, out: str, args: Sequence[object], beats: Beats | None = None) -> None:
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


def _silent(ctx: mp.ProcessContext, beats: Beats, limit: float, started: float) -> list[tuple[int, int, float, str]]:
    """(rank, pid, seconds, process state) of every live rank whose last heartbeat is older
    than ``limit``; a rank that has not beaten yet is silent since ``started`` (its launch:
    one stopped before its first heartbeat is named as any other)."""
    now, out = time.monotonic(), []
    for r, p in enumerate(ctx.processes):
        age = now - (beats[r] if beats[r] > 0 else started)
        if age > limit and p.is_alive():
            out.append((r, p.pid, age, process_state(p.pid)))
    return out


def _stop_all(ctx: mp.ProcessContext) -> None:
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
    for p in ctx.processes:
        p.join(5)


def _silence_error(silent: list[tuple[int, int, float, str]], beats: Beats, then: str = "") -> DistributedError:
    r, pid, age, state = max(silent, key=lambda x: x[2])
    never = "" if beats[r] > 0 else " (none since it was started)"
    return DistributedError(f"rank {r} (pid {pid}, {state}) stopped responding: no heartbeat for "
                            f"{age:.0f} s{never}{then}; every rank stopped (a stopped rank: look for what sent it "
                            "SIGSTOP; a frozen one: its stack, e.g. py-spy dump --pid)")


def _died(exc: mp.ProcessExitedException) -> DistributedError:
    """The error of a rank that died of a signal or an exit status (no exception of its own);
    one ended by SIGTERM, SIGHUP or SIGINT carries the exit status of a terminated run
    (``exit_status``: 128 + the signal), as the launcher itself would exit."""
    import signal

    name = getattr(exc, "signal_name", None)
    status = 128 + int(getattr(signal, name)) if name in ("SIGTERM", "SIGHUP", "SIGINT") else None
    return DistributedError(f"rank {exc.error_index} (pid {exc.error_pid}) died ({exc}); every rank stopped",
                            exit_status=status)


def local_placement(nproc: int, backend: str | None) -> RankPlacement:
    """:func:`place_ranks` for this machine: the device rule's device type and torch's
    count of visible CUDA devices."""
    from fbrapids.trainers.device import resolve_device

    device_type = resolve_device().type
    return place_ranks(nproc, backend, device_type, torch.cuda.device_count() if device_type == "cuda" else 0)


def spawn(fn: Callable[..., _T], nproc: int, args: Sequence[object] = (), backend: str | None = "gloo",
          timeout_s: float = 600.0, collective_timeout_s: float = 60.0,
          heartbeat_timeout_s: float = 30.0, placement: RankPlacement | None = None) -> list[_T]:
    """Run ``fn(rank, nproc, *args)`` on ``nproc`` local ranks; their return values, in
    rank order.  ``fn`` must be importable (a module-level function).  ``backend``: the
    process group's (None: as the device rule says); ``placement``: the ranks' devices and
    backend decided already (:func:`place_ranks`; default :func:`local_placement`), refused
    before any rank starts when impossible.  A failing rank is a
    :class:`~fbrapids.errors.DistributedError` naming it, the others stopped; so is a rank
    without a heartbeat for ``heartbeat_timeout_s`` (module docstring), one stopped before
    its first heartbeat included.  The launch's files (the rendezvous, the ranks' results,
    torch's error files) live in a temporary ``fbrapids-ranks-<pid>-*`` folder, removed on
    every exit (one a killed launcher left is removed by the next launch)."""
    from fbrapids.runs.workdir import temporary_work_dir

    if nproc < 1:
        raise DistributedError(f"nproc must be >= 1, got {nproc}")
    placement = placement or local_placement(nproc, backend)
    with temporary_work_dir("fbrapids-ranks-") as tmp:
        init = "file://" + str(tmp / "rendezvous")
        beats = mp.get_context("spawn").RawArray("d", nproc)
        started = time.monotonic()
        ctx = mp.start_processes(_entry, args=(fn, nproc, init, placement, collective_timeout_s, str(tmp), tuple(args),
                                               beats), nprocs=nproc, join=False, start_method="spawn")
        try:
            _watch(ctx, beats, started, timeout_s, heartbeat_timeout_s, nproc)
        finally:
            for f in ctx.error_files:  # a failed rank's traceback, read by now: torch leaves it in $TMPDIR
                with contextlib.suppress(OSError):
                    os.unlink(f)
        out = []
        for r in range(nproc):
            with open(tmp / f"rank-{r}.pkl", "rb") as f:
                out.append(pickle.load(f))
        return out


def _watch(ctx: mp.ProcessContext, beats: Beats, started: float, timeout_s: float, heartbeat_timeout_s: float, nproc: int) -> None:
    """Wait for the ranks of ``ctx`` to finish; a failed, silent or overdue rank is a
    :class:`~fbrapids.errors.DistributedError` naming it, every rank stopped (:func:`spawn`)."""
    deadline = started + timeout_s
    quiet: list[tuple[int, int, float, str]] = []  # ranks silent a while at the last look (before a failure)
    try:
        while True:
            quiet = _silent(ctx, beats, 10 * HEARTBEAT_S, started)
            # a stopped process (SIGSTOP) past the timeout, before its first heartbeat too; any other silent one
            # (frozen) past 4 times it, and one still starting (importing on a loaded machine) past STARTUP_S
            silent = [q for q in quiet if q[2] > (heartbeat_timeout_s if q[3].startswith("stopped") else
                                                  4 * heartbeat_timeout_s if beats[q[0]] > 0 else
                                                  max(4 * heartbeat_timeout_s, STARTUP_S))]
            if silent:
                _stop_all(ctx)
                raise _silence_error(silent, beats)
            if ctx.join(timeout=0.5):
                return
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
            raise _silence_error(quiet, beats, f", and then {failed}") from exc
        # a full disk on a rank: its errno kept, so that the launcher's caller says what could be freed
        raise DistributedError(f"{failed}; every rank stopped", errno=_errno_of(failed)) from exc
    except mp.ProcessExitedException as exc:
        _stop_all(ctx)
        raise _died(exc) from exc
    except BaseException:  # interrupted (Ctrl-C, SIGTERM, a caller's timeout): no rank is left running
        _stop_all(ctx)
        raise


def _errno_of(line: str) -> int | None:
    """The errno an ``OSError`` line names (``... [Errno 28] ...``), or None.

    Example:
        >>> _errno_of("OSError: [Errno 28] No space left on device: '/w/x' (12 bytes)"), _errno_of("ValueError: x")
        (28, None)
    """
    import re

    m = re.search(r"\[Errno (\d+)\]", line)
    return int(m.group(1)) if m else None
