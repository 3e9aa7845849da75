"""The allocator's freed memory: blocks a training step frees are reused by the next step
once :func:`fbrapids.runs.heap.keep_freed_blocks` is on, where glibc's defaults unmap them
and fault every page in again; :func:`~fbrapids.runs.heap.release_memory` still hands them
back, and a run's memory watch does before it judges a sample past the budget.  Counted in
page faults (``getrusage``) and resident bytes, in a process of its own (the setting is the
process's)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# three 40 MB tensors (torch's, which ask for no huge pages, as numpy's large arrays do) (over glibc's largest automatic mapping threshold, 32 MiB) allocated,
# written and freed, as a training step's are; minor page faults per step after
# the heap has grown to hold them, before and after keep_freed_blocks; then the RSS after a release
STEPS = r"""
import json, resource, sys
import torch
from fbrapids.runs.heap import keep_freed_blocks, release_memory

def faults_per_step():
    seen = []
    for _ in range(8):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [torch.ones(10_000_000) for _ in range(3)]
        del blocks
        seen.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return seen[-3:]  # once the heap has grown to hold a step (a few steps)

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

default = faults_per_step()
took = keep_freed_blocks()
kept = faults_per_step()
held = rss()
release_memory()
print(json.dumps({"default": default, "took": took, "kept": kept, "held": held, "released": rss()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_steps_freed_blocks_are_reused_and_still_handed_back():
    out = subprocess.run([sys.executable, "-c", STEPS], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    pages = 3 * 40_000_000 // 4096  # the pages of one step's blocks
    assert got["took"] is True
    assert min(got["default"]) > 0.9 * pages  # glibc's defaults: every page faulted in at every step
    assert max(got["kept"]) < 0.05 * pages  # kept: the next step reuses them
    assert got["held"] - got["released"] > 0.9 * 3 * 40_000_000  # and a release still hands them back


# blocks a run freed and the allocator kept (keep_freed_blocks), then a memory watch whose budget
# lies between what the process holds and what it holds with those pages
WATCH = r"""
import json
import torch
from fbrapids.runs.heap import keep_freed_blocks
from fbrapids.runs.memory_watch import MemoryWatch, tree_rss

keep_freed_blocks()
base = tree_rss()
blocks = [torch.ones(10_000_000) for _ in range(3)]  # 120 MB, written
del blocks
kept = tree_rss()
watch = MemoryWatch(base + 60_000_000)
seen = watch.sample()
print(json.dumps({"base": base, "kept": kept, "seen": seen, "over": watch.over}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_watch_hands_the_kept_free_pages_back_before_it_stops_a_run():
    """120 MB a run freed stay resident, kept for reuse: a sample past the budget first hands
    them back, and the run, holding less than its budget, goes on (it was stopped for them)."""
    out = subprocess.run([sys.executable, "-c", WATCH], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["kept"] - got["base"] > 100_000_000  # (the freed blocks were kept: resident)
    assert got["over"] is None and got["seen"] < got["base"] + 60_000_000, got
