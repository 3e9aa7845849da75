"""What a benchmark ran on, in words, for its JSON line and the README table; and whether a
speed figure measured there is fit to publish (:class:`NoiseCheck`).

A speed figure is a ratio of fbrapids to a peer run side by side, but a ratio taken while
the machine is busy can be off by far more than the effect measured (a peer slowed 10x by
a neighbour's threads once made the store look 1.5x faster than it was).  So each timing
benchmark records, beside its ratios:

* the load average at the start and at the end;
* a machine-speed reference, :func:`speed_reference` (a fixed loop, one thread), at the
  start and at the end;
* its peers' absolute rates,

and :func:`noise_verdict` marks the run ``"noisy"`` when the load exceeded
:data:`MAX_LOAD` at the start, or a peer ran more than :data:`MAX_SLOWDOWN` below its
reference rate on this machine, or the fixed loop did, or a peer's kernel is known to run
far below its own speed on this CPU (:func:`sse_avx_mix_penalty`).  The reference rates live in
``benchmarks/results/reference_rates.json``, per machine (its CPU model, family and vector
width, and its cores: :func:`machine_key`): a
machine without them gets them from its first quiet run (load at most :data:`MAX_LOAD` at
the start, the fixed loop steady within 10% from start to end), later runs are judged
against them.  The load at the end is recorded but does not decide: a benchmark that runs
two threads for minutes on two cores ends near 2 by its own doing (``trial_cost``: 2.6), so
on such a machine it could never record a reference; the fixed loop at the end, run after
the benchmark's own work, is what shows another process taking the machine.  A noisy run's JSON is kept (its figures are still what was measured), but
``scripts/docs_figures.py`` refuses to put it into the README.

**A peer slowed by the CPU itself.**  fbgemm's JIT-compiled row-wise Adagrad (the update in
TorchRec's ``FusedEmbeddingBagCollection`` and in fbgemm's TBE on the CPU) computes a row's
mean square with 256-bit AVX and then the row's scale with legacy (non-VEX) SSE scalar
instructions, with no ``vzeroupper`` between them.  Some CPUs charge that mix heavily: on a
2-core Intel Xeon (family 6, model 207) a probe of the same instruction sequence ran 29-35x
slower than its VEX-only twin, and fbgemm's TBE ran 1.6M ids/s there against 30M on an AMD
EPYC whose fixed loop is only 1.6x faster.  A ratio against such a peer says nothing about
fbrapids; and the first quiet run on such a machine would record the crippled rate as the
peer's reference.  So a benchmark names its peers whose kernels mix the two
(:data:`SSE_AVX_MIXING_PEERS`), and where :func:`sse_avx_mix_penalty` exceeds
:data:`MAX_SSE_AVX_PENALTY` those peers make the run noisy and their rates are never
recorded as references.

Example:
    >>> "cores" in machine_description()
    True
    >>> noise_verdict(0.5, 100.0, 98.0, {"peer@1": 70.0}, {"machine_speed": 100.0, "peer@1": 100.0})
    ['peer@1 ran at 0.70 of its reference rate (100)']
    >>> noise_verdict(2.0, 100.0, 100.0, {}, {"machine_speed": 100.0})
    ['load average 2.00 at the start (more than 1.5)']
    >>> noise_verdict(0.5, 100.0, 100.0, {"torchrec_fused@1": 90.0}, {"machine_speed": 100.0, "torchrec_fused@1": 90.0},
    ...               sse_avx_penalty=31.0)  # doctest: +ELLIPSIS
    ["torchrec_fused@1: fbgemm's JIT row-wise Adagrad mixes legacy SSE and AVX, which this CPU runs 31x slower ..."]
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

#: a run whose load average exceeded this at the start is noisy
MAX_LOAD = 1.5
#: a run whose peer (or the fixed loop) ran more than this fraction below its reference rate is noisy
MAX_SLOWDOWN = 0.25
#: where the machines' reference rates are kept (``$FBRAPIDS_REFERENCE_RATES`` elsewhere: the
#: test suite's runs keep theirs out of the repository)
REFERENCE_RATES = Path(__file__).resolve().parent / "results" / "reference_rates.json"
REFERENCE_RATES_ENV = "FBRAPIDS_REFERENCE_RATES"
#: a CPU that runs legacy SSE mixed with 256-bit AVX more than this many times slower than the
#: same work in VEX form cripples :data:`SSE_AVX_MIXING_PEERS`
MAX_SSE_AVX_PENALTY = 3.0
#: peers whose kernels mix legacy SSE with 256-bit AVX (fbgemm's JIT row-wise Adagrad), by the
#: name a benchmark gives them before its ``@threads``
SSE_AVX_MIXING_PEERS = ("torchrec_fused", "fbgemm_tbe")

# the probe: per iteration, one row's worth of fbgemm's sequence (a 256-bit load and add, then
# legacy SSE scalar load, add and square root), and the same in VEX form; best of 3 each
_SSE_AVX_PROBE = r"""
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    static float buf[16] = {1.0f};
    const long n = 200000;
    double legacy = 1e9, vex = 1e9;
    for (int r = 0; r < 3; r++) {
        double t = now();
        for (long i = 0; i < n; i++)
            __asm__ volatile("vmovups (%0), %%ymm2\n vaddps %%ymm2, %%ymm0, %%ymm0\n movss (%0), %%xmm1\n"
                             " addss %%xmm1, %%xmm3\n sqrtss %%xmm3, %%xmm3\n" :: "r"(buf) : "xmm0", "xmm1", "xmm2", "xmm3");
        double a = now() - t;
        t = now();
        for (long i = 0; i < n; i++)
            __asm__ volatile("vmovups (%0), %%ymm2\n vaddps %%ymm2, %%ymm0, %%ymm0\n vmovss (%0), %%xmm1\n"
                             " vaddss %%xmm1, %%xmm3, %%xmm3\n vsqrtss %%xmm3, %%xmm3, %%xmm3\n"
                             :: "r"(buf) : "xmm0", "xmm1", "xmm2", "xmm3");
        double b = now() - t;
        __asm__ volatile("vzeroupper");
        if (a < legacy) legacy = a;
        if (b < vex) vex = b;
    }
    printf("%.6g %.6g\n", legacy / n * 1e9, vex / n * 1e9);
    return 0;
}
"""


def reference_rates_path() -> Path:
    """:data:`REFERENCE_RATES`, or the file ``$FBRAPIDS_REFERENCE_RATES`` names."""
    return Path(os.environ[REFERENCE_RATES_ENV]) if os.environ.get(REFERENCE_RATES_ENV) else REFERENCE_RATES


def machine_description(backend: str = "cpu") -> str:
    """CPU model (with :func:`cpu_identity`: one model name covers CPUs far apart) and cores,
    the load average at the time, and the GPU when one was used."""
    info = _cpuinfo()  # read once: the model name here, the family, model and vector width from cpu_identity
    cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
               platform.processor() or platform.machine())
    ident = cpu_identity(info)
    text = f"{os.cpu_count()} cores ({cpu}; {ident})" if ident else f"{os.cpu_count()} cores ({cpu})"
    try:
        text += f", load average {os.getloadavg()[0]:.1f} at the start"
    except OSError:
        pass
    if backend == "gpu":
        try:
            import cupy

            name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
            text += f", GPU {name.decode() if isinstance(name, bytes) else name}"
        except Exception as exc:  # noqa: BLE001 - describing the machine must not fail the run
            text += f", GPU (unnamed: {exc})"
    return text


def write_result(out: "os.PathLike[str] | str", result: dict) -> None:
    """Write a benchmark's ``result`` to ``out`` (indented JSON, its folder made) and print it
    as the one JSON line the benchmark ends with.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "r" / "x.json"
        >>> write_result(p, {"a": 1})
        {"a": 1}
        >>> json.loads(p.read_text())
        {'a': 1}
    """
    from pathlib import Path

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    sys.stdout.write(json.dumps(result) + "\n")


def _cpuinfo() -> str:
    """The text of ``/proc/cpuinfo``, ``""`` where there is none."""
    try:
        with open("/proc/cpuinfo") as fh:
            return fh.read()
    except OSError:
        return ""


def cpu_identity(cpuinfo: str | None = None) -> str:
    r"""What tells one CPU from another of the same model name: ``family F model M`` and the
    widest vector extension it offers (``AVX-512``, ``AVX2``, ``AVX``; none named without),
    from ``/proc/cpuinfo`` (``cpuinfo``: its text); ``""`` where it says neither.

    A model name alone does not: every 2-core AMD machine here reads ``AMD EPYC``, and two
    of them differ far more than any noise.  On family 25 model 17 (AVX-512) the fixed loop
    of :func:`speed_reference` runs at about a quarter of an AVX2 ``AMD EPYC``'s reference:
    numpy's AVX-512 sort takes 2.7 ms for the loop's 65,536 floats there, 0.64 ms with
    numpy's AVX-512 paths switched off (``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL"``),
    while the TorchRec peer runs at 0.87 of its rate on the AVX2 machine.  Judged against
    the other's references, every run there was refused.

    Example:
        >>> cpu_identity("cpu family\t: 25\nmodel\t\t: 17\nflags\t\t: fpu avx avx2 avx512f\n")
        'family 25 model 17, AVX-512'
        >>> cpu_identity("cpu family\t: 23\nmodel\t\t: 49\nflags\t\t: fpu avx avx2\n")
        'family 23 model 49, AVX2'
        >>> cpu_identity("processor\t: 0\n")
        ''
    """
    fields: dict[str, str] = {}
    for line in (_cpuinfo() if cpuinfo is None else cpuinfo).splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip(), value.strip())
    parts = []
    if "cpu family" in fields and "model" in fields:
        parts.append(f"family {fields['cpu family']} model {fields['model']}")
    flags = set(fields.get("flags", "").split())
    isa = next((label for flag, label in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")) if flag in flags),
               None)
    if isa:
        parts.append(isa)
    return ", ".join(parts)


def machine_key() -> str:
    """The machine a reference rate belongs to: its CPU model, core count and
    :func:`cpu_identity` (family, model and vector width: one model name covers CPUs far
    apart).

    Example:
        >>> "cores" in machine_key()
        True
    """
    return machine_description().split(", load average")[0]


def speed_reference(loops: int = 8, repeats: int = 3) -> float:
    """Loops per second of a fixed loop on one thread (the best of ``repeats``): a sort of
    65,536 floats, a cumulative sum over them, and 20,000 additions in Python; a yardstick
    of what this machine gives one thread now, not of any system measured.

    Example:
        >>> speed_reference(loops=1, repeats=1) > 0
        True
    """
    import numpy as np

    a = np.random.default_rng(0).random(1 << 16)
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(loops):
            np.sort(a)
            np.cumsum(a)
            total = 0
            for i in range(20_000):
                total += i
        best = max(best, loops / (time.perf_counter() - t))
    return best


@functools.lru_cache(maxsize=1)
def sse_avx_mix_penalty() -> dict[str, float] | None:
    """How much slower this CPU runs legacy SSE scalar instructions mixed with 256-bit AVX than
    the same work in VEX form: ``{"ratio", "legacy_ns", "vex_ns"}`` (ns per iteration of a
    probe compiled with ``cc`` and run once per process), or None where it cannot be measured
    (not x86-64, no C compiler, no AVX).  See the module docstring for why it matters.

    Example:
        >>> p = sse_avx_mix_penalty()
        >>> p is None or p["ratio"] > 0
        True
    """
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if platform.machine() not in ("x86_64", "AMD64") or cc is None:
        return None
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
        if "avx" not in flags:
            return None
        with tempfile.TemporaryDirectory(prefix="fbrapids-sse-avx-") as tmp:
            src, exe = Path(tmp) / "probe.c", Path(tmp) / "probe"
            src.write_text(_SSE_AVX_PROBE)
            subprocess.run([cc, "-O1", str(src), "-o", str(exe)], check=True, capture_output=True, timeout=60)
            legacy, vex = (float(x) for x in subprocess.run([str(exe)], check=True, capture_output=True, text=True,
                                                             timeout=60).stdout.split())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return {"ratio": legacy / vex, "legacy_ns": legacy, "vex_ns": vex}


def crippled_peers(peers: Iterable[str], sse_avx_penalty: float | None) -> list[str]:
    """The peers among ``peers`` (``name@threads``) that this CPU cripples: those of
    :data:`SSE_AVX_MIXING_PEERS` where the mix costs more than :data:`MAX_SSE_AVX_PENALTY`.

    Example:
        >>> crippled_peers(["torchrec_fused@1", "embeddingbag@1"], 31.0), crippled_peers(["torchrec_fused@1"], 1.1)
        (['torchrec_fused@1'], [])
    """
    if sse_avx_penalty is None or sse_avx_penalty <= MAX_SSE_AVX_PENALTY:
        return []
    return [p for p in peers if mixes_sse_avx(p)]


def mixes_sse_avx(peer: str) -> bool:
    """Whether a peer (``name@threads``) is one of :data:`SSE_AVX_MIXING_PEERS`.

    Example:
        >>> mixes_sse_avx("fbgemm_tbe@2"), mixes_sse_avx("torch_embeddingbag@1")
        (True, False)
    """
    return peer.split("@", 1)[0] in SSE_AVX_MIXING_PEERS


def noise_verdict(load_start: float, speed_start: float, speed_end: float, peers: dict[str, float],
                  reference: dict[str, float], sse_avx_penalty: float | None = None) -> list[str]:
    """Why a run is noisy (empty: it is not): its load at the start above :data:`MAX_LOAD`, the
    fixed loop at the start or end, or a peer's rate, more than :data:`MAX_SLOWDOWN` below
    ``reference`` (name -> rate; the fixed loop's as ``"machine_speed"``).  A peer or a
    fixed loop without a reference rate is noisy too: nothing tells its rate was usual.  So is
    a peer this CPU cripples (:func:`crippled_peers` at ``sse_avx_penalty``, the
    :func:`sse_avx_mix_penalty` ratio)."""
    why = []
    if load_start > MAX_LOAD:
        why.append(f"load average {load_start:.2f} at the start (more than {MAX_LOAD})")
    for name in crippled_peers(peers, sse_avx_penalty):
        why.append(f"{name}: fbgemm's JIT row-wise Adagrad mixes legacy SSE and AVX, which this CPU runs "
                   f"{sse_avx_penalty:.0f}x slower than the same work in VEX form (more than {MAX_SSE_AVX_PENALTY:g}x): "
                   "the peer runs far below its own speed here")
    for name, rate in [("machine_speed", min(speed_start, speed_end)), *sorted(peers.items())]:
        ref = reference.get(name)
        if not ref:
            why.append(f"no reference rate of {name} on this machine")
        elif rate < (1 - MAX_SLOWDOWN) * ref:
            why.append(f"{name} ran at {rate / ref:.2f} of its reference rate ({ref:.3g})")
    return why


def _read_references() -> dict[str, Any]:
    path = reference_rates_path()
    return json.loads(path.read_text()) if path.exists() else {}


class NoiseCheck:
    """The load and the fixed loop at a benchmark's start (made when it starts) and its end
    (:meth:`finish`), and the verdict on its peers' rates (see the module docstring)."""

    def __init__(self, benchmark: str) -> None:
        self.benchmark = benchmark
        self.load_start = os.getloadavg()[0]
        self.speed_start = speed_reference()

    def finish(self, peers: dict[str, float], set_reference: bool = False) -> dict[str, Any]:
        """The figures to record with the run: load and fixed loop at both ends, the peers'
        rates and their references, and ``verdict`` (``"accepted"`` / ``"noisy"``) with
        ``noisy_because``.  A quiet run (the load rule at the start, the fixed loop steady
        within 10% from start to end) records its rates as this machine's references where it
        has none, or always with ``set_reference``; never a crippled peer's
        (:func:`crippled_peers`)."""
        speed_end, load_end = speed_reference(), os.getloadavg()[0]
        refs = _read_references()
        key = machine_key()
        probe = sse_avx_mix_penalty() if any(mixes_sse_avx(p) for p in peers) else None
        penalty = probe["ratio"] if probe else None
        crippled = set(crippled_peers(peers, penalty))
        mine = dict(refs.get(key, {}).get(self.benchmark, {}))
        mine.setdefault("machine_speed", refs.get(key, {}).get("machine_speed", 0.0))
        quiet = (self.load_start <= MAX_LOAD  # (the end's load is the benchmark's own: the fixed loop judges the end)
                 and abs(speed_end - self.speed_start) <= 0.1 * max(speed_end, self.speed_start))
        recorded = []
        if quiet:
            for name, rate in [("machine_speed", max(self.speed_start, speed_end)), *peers.items()]:
                if name in crippled:  # never a crippled rate as the reference
                    continue
                if set_reference or not mine.get(name):
                    mine[name] = rate
                    recorded.append(name)
            if recorded:
                entry = refs.setdefault(key, {})
                entry["machine_speed"] = mine["machine_speed"]
                entry[self.benchmark] = {k: v for k, v in mine.items() if k != "machine_speed"}
                path = reference_rates_path()
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(refs, indent=1, sort_keys=True) + "\n")
        why = noise_verdict(self.load_start, self.speed_start, speed_end, peers, mine, penalty)
        return {"load_average": {"start": self.load_start, "end": load_end}, "sse_avx_mix_penalty": probe,
                "machine_speed": {"start": self.speed_start, "end": speed_end, "reference": mine.get("machine_speed")},
                "peer_rates": peers, "peer_reference_rates": {k: mine.get(k) for k in peers},
                "references_recorded": recorded, "verdict": "noisy" if why else "accepted", "noisy_because": why}
