"""FarmHash Fingerprint64 in fbrapids/kernels/csrc/farmhash.h against TensorFlow's test
vectors and pyfarmhash (the oracle), compiled as host C."""
from __future__ import annotations

import ctypes
import random

import numpy as np
import pytest

from _c_harness import build_harness, find_cc, pack_strings, ptr

farmhash = pytest.importorskip("farmhash", reason="pyfarmhash (import farmhash) is the oracle")

pytestmark = pytest.mark.skipif(find_cc() is None, reason="no C compiler (gcc) on PATH")

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_harness("farmhash_harness.c", tmp_path_factory.mktemp("farmhash"))


def c_fp64(lib, items: list[bytes]) -> list[int]:
    data, offs = pack_strings(items)
    out = np.zeros(len(items), dtype=np.uint64)
    lib.h_fp64(ptr(data), ptr(offs), ctypes.c_int64(len(items)), ptr(out))
    return [int(v) for v in out]


def c_bucket(lib, items: list[bytes], buckets: int) -> list[int]:
    data, offs = pack_strings(items)
    out = np.zeros(len(items), dtype=np.int64)
    lib.h_hash_bucket(ptr(data), ptr(offs), ctypes.c_int64(len(items)),
                      ctypes.c_int64(buckets), ptr(out))
    return [int(v) for v in out]


def test_tensorflow_vectors(lib):
    got = c_fp64(lib, [b"Hello", b"World", b"", b"hello"])
    assert got == [15404698994557526151, 18308117990299812472,
                   11160318154034397263, 13009744463427800296]


def test_hash_bucket_vectors(lib):
    assert c_bucket(lib, [b"a", b"b", b"c", b"d"], 10) == [9, 2, 2, 5]
    assert [v % 3 for v in c_fp64(lib, [b"Hello", b"TensorFlow", b"2.x"])] == [0, 2, 2]
    assert c_bucket(lib, [b"Hello", b"TensorFlow", b"2.x"], 3) == [0, 2, 2]


def _random_text(rng: random.Random, n: int) -> str:
    alphabet = "abcXYZ019 _|-.\"\\\n\t" + "éüß中文字😀ж" + "\x00\x7f"
    return "".join(rng.choice(alphabet) for _ in range(n))


def test_every_length_0_to_300(lib):
    rng = random.Random(1)
    # One byte-random and one text string per length: covers every code path boundary
    # (0, 1-3, 4-7, 8-16, 17-32, 33-64, 65+ and each tail size of the 64-byte loop).
    items = [bytes(rng.getrandbits(8) for _ in range(n)) for n in range(301)]
    items += [_random_text(rng, n).encode()[:n] for n in range(301)]
    assert c_fp64(lib, items) == [farmhash.fingerprint64(b) for b in items]


def test_streaming_hasher_equals_the_whole_key(lib):
    """fbx_fps (keys of any length, fed in pieces: long cross / n-gram keys) gives the
    fingerprint of the whole key, for every length to 300 and a few past 4,096 bytes,
    whatever the piece size."""
    rng = random.Random(3)
    items = [bytes(rng.getrandbits(8) for _ in range(n)) for n in list(range(301)) + [4095, 4096, 4097, 9000]]
    want = [farmhash.fingerprint64(b) for b in items]
    data, offs = pack_strings(items)
    for piece in (1, 3, 63, 64, 65, 4096):
        out = np.zeros(len(items), dtype=np.uint64)
        lib.h_fp64_pieces(ptr(data), ptr(offs), ctypes.c_int64(len(items)), ctypes.c_int64(piece), ptr(out))
        assert [int(v) for v in out] == want, f"pieces of {piece} bytes"


def test_agrees_with_pyfarmhash_on_random_strings(lib):
    rng = random.Random(7)
    items: list[bytes] = []
    for i in range(12000):
        kind = i % 6
        if kind == 0:
            items.append(b"")
        elif kind == 1:
            items.append(_random_text(rng, rng.randint(1, 40)).encode("utf-8"))
        elif kind == 2:
            items.append(_random_text(rng, rng.randint(1025, 3000)).encode("utf-8"))
        elif kind == 3:
            items.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))))
        elif kind == 4:
            items.append(str(rng.randint(INT64_MIN, INT64_MAX)).encode())
        else:
            items.append(" ".join(_random_text(rng, rng.randint(1, 9))
                                  for _ in range(rng.randint(1, 12))).encode("utf-8"))
    assert sum(len(b) > 1024 for b in items) >= 1000
    assert any(any(c >= 0x80 for c in b) for b in items)
    expected = [farmhash.fingerprint64(b) for b in items]
    got = c_fp64(lib, items)
    bad = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not bad, f"{len(bad)} mismatches, first: {items[bad[0]][:80]!r}"


def test_unaligned_start(lib):
    # Strings packed back to back start at every alignment; the loads are byte-wise.
    rng = random.Random(3)
    items = [bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 3, 7, 9, 65, 131])))
             for _ in range(500)]
    assert c_fp64(lib, items) == [farmhash.fingerprint64(b) for b in items]


INTS = [0, 1, -1, 9, 10, -10, 42, 99, 100, 123456789, -987654321, 2**31 - 1, -(2**31),
        2**32, 10**18, 10**19 // 10 * 9, INT64_MAX, INT64_MIN, INT64_MIN + 1, INT64_MAX - 1]


def test_i64_to_dec(lib):
    rng = random.Random(5)
    vals = INTS + [rng.randint(INT64_MIN, INT64_MAX) for _ in range(2000)]
    arr = np.array(vals, dtype=np.int64)
    out = np.zeros(24 * len(vals), dtype=np.uint8)
    lens = np.zeros(len(vals), dtype=np.int32)
    lib.h_i64_to_dec(ptr(arr), ctypes.c_int64(len(vals)), ptr(out), ptr(lens))
    for i, v in enumerate(vals):
        assert 1 <= lens[i] <= 20
        assert bytes(out[24 * i: 24 * i + lens[i]]).decode() == str(v)


def test_u64_to_dec(lib):
    rng = random.Random(6)
    vals = [0, 1, 9, 10, 2**63, 2**64 - 1, 11160318154034397263] + \
        [rng.getrandbits(64) for _ in range(2000)]
    arr = np.array(vals, dtype=np.uint64)
    out = np.zeros(24 * len(vals), dtype=np.uint8)
    lens = np.zeros(len(vals), dtype=np.int32)
    lib.h_u64_to_dec(ptr(arr), ctypes.c_int64(len(vals)), ptr(out), ptr(lens))
    for i, v in enumerate(vals):
        assert bytes(out[24 * i: 24 * i + lens[i]]).decode() == str(v)


def test_integers_hash_as_decimal_text(lib):
    rng = random.Random(8)
    vals = INTS + [rng.randint(INT64_MIN, INT64_MAX) for _ in range(3000)] + \
        [rng.randint(-1000, 1000) for _ in range(500)]
    arr = np.array(vals, dtype=np.int64)
    out = np.zeros(len(vals), dtype=np.uint64)
    lib.h_fp64_i64(ptr(arr), ctypes.c_int64(len(vals)), ptr(out))
    assert [int(v) for v in out] == [farmhash.fingerprint64(str(v)) for v in vals]
