"""The SSD tier fails with a named error, never SIGBUS: a tier file truncated mid-run, a
disk that is too small (RLIMIT_FSIZE in a child process), reads past the end."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fbrapids.errors import StoreError, TierFileError
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.sparse.ssd import SsdTier

ROOT = Path(__file__).resolve().parents[2]


def small_tiered(tmp_path: Path) -> TieredEmbeddingStore:
    return TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=16, host_rows=16, ssd_dir=str(tmp_path), device="cpu"),
                                "t")


def spill(store: TieredEmbeddingStore, n_ids: int) -> None:
    """Look up ``n_ids`` distinct ids in batches of 8, so most rows go down to the SSD file."""
    for start in range(0, n_ids, 8):
        store.lookup(np.arange(start, start + 8, dtype=np.uint64), requires_grad=False)
        store.end_step()


def test_a_truncated_tier_file_is_a_named_error_not_a_crash(tmp_path: Path) -> None:
    s = small_tiered(tmp_path)
    spill(s, 200)
    assert s.stats()["ssd"]["bytes_in"] > 0
    path = tmp_path / "t" / "rows.f32"
    os.truncate(path, 100)  # another process cuts the file mid-run
    with pytest.raises(TierFileError, match="truncated") as err:
        s.lookup(np.arange(0, 8, dtype=np.uint64))  # rows 0..7 are on the SSD file only
    assert str(path) in str(err.value) and err.value.path == str(path)
    assert isinstance(err.value, StoreError)


def test_a_truncation_racing_with_a_copy_is_caught_in_c(tmp_path: Path) -> None:
    """The size check passed, then the file shrank: the copy's SIGBUS is an error code."""
    tier = SsdTier(tmp_path, width=2, capacity=4096)
    tier.write(np.array([0, 1, 4000]), np.ones((3, 2), np.float32))
    os.ftruncate(tier.fd, 8)  # only row 0 left (a page of the file remains mapped)
    out = np.empty((3, 2), np.float32)
    assert tier.map.copy(np.array([0, 1, 4000]), 8, out) == 3  # 1 + the index of row 4000
    with pytest.raises(TierFileError, match="truncated"):
        tier.read(np.array([0, 4000]))


def test_the_file_is_reserved_up_front(tmp_path: Path) -> None:
    tier = SsdTier(tmp_path, width=4, capacity=5000)
    st = os.stat(tier.path)
    assert st.st_size >= 5000 * 16
    if st.st_blocks:  # file systems that report blocks: the space is allocated, not a hole
        assert st.st_blocks * 512 >= 5000 * 16


CHILD = textwrap.dedent("""
    import resource, signal, sys
    import numpy as np
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # a 1 MiB "disk"
    from fbrapids.errors import TierFileError
    from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
    s = TieredEmbeddingStore(StoreConfig(dim=32, cache_rows=512, host_rows=512, ssd_dir=sys.argv[1],
                                         device="cpu"), "t")
    try:
        for start in range(0, 200000, 256):
            s.lookup(np.arange(start, start + 256, dtype=np.uint64), requires_grad=False)
            s.end_step()
    except TierFileError as exc:
        print("ERROR", exc)
        sys.exit(3)
    print("no error")
""")


@pytest.mark.skipif(not hasattr(os, "posix_fallocate"), reason="needs posix_fallocate")
def test_a_full_disk_is_a_named_error_in_a_child_process(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 3, (out.returncode, out.stdout[-2000:], out.stderr[-3000:])  # not 135 (SIGBUS)
    assert f"ERROR cannot grow the SSD tier file {tmp_path / 't' / 'rows.f32'}" in out.stdout
    assert "EFBIG" in out.stdout
