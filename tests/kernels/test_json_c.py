"""Strict JSON validation + dotted-path extraction in fbrapids/kernels/csrc/json_path.h,
compiled as host C, against Python's json.loads made strict (the oracle)."""
from __future__ import annotations

import ctypes
import json
import random

import numpy as np
import pytest

from benchmarks.workload_pandas import JSON_MAX_DEPTH as MAX_DEPTH, strict_text_ok

from _c_harness import build_harness, find_cc, pack_strings, ptr

pytestmark = pytest.mark.skipif(find_cc() is None, reason="no C compiler (gcc) on PATH")

FOUND, MALFORMED, MISSING, NOT_STRING = 0, 1, 2, 3


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_harness("json_harness.c", tmp_path_factory.mktemp("json"))


def c_get(lib, docs: list[bytes], path: str) -> list[tuple[int, bytes | None]]:
    """Run the two-phase C extraction (sizes, then values) over docs."""
    data, offs = pack_strings(docs)
    n = len(docs)
    p = path.encode("utf-8")
    pbuf = ctypes.create_string_buffer(p, len(p) + 1)
    sizes = np.zeros(n, dtype=np.int64)
    status = np.full(n, -9, dtype=np.int32)
    lib.h_json_sizes(ptr(data), ptr(offs), ctypes.c_int64(n), pbuf, ctypes.c_int64(len(p)),
                     ptr(sizes), ptr(status))
    out_offs = np.zeros(n + 1, dtype=np.int64)
    out_offs[1:] = np.cumsum(np.maximum(sizes, 0))
    out = np.zeros(int(out_offs[-1]) + 1, dtype=np.uint8)
    status2 = np.full(n, -9, dtype=np.int32)
    lib.h_json_values(ptr(data), ptr(offs), ctypes.c_int64(n), pbuf, ctypes.c_int64(len(p)),
                      ptr(out_offs), ptr(out), ptr(status2))
    assert (status == status2).all()
    res = []
    for i in range(n):
        st = int(status[i])
        if st == FOUND:
            res.append((st, bytes(out[out_offs[i]:out_offs[i + 1]])))
        else:
            assert sizes[i] == -1
            res.append((st, None))
    return res


def _reject_constant(name: str):
    raise ValueError(f"non-RFC constant {name}")


def oracle(doc: bytes, path: str) -> tuple[int, bytes | None]:
    """Python's json.loads made RFC-strict, then a walk of the dotted path."""
    try:
        text = doc.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant,
                           parse_int=lambda s: 0)  # no 4300-digit int limit
    except (ValueError, RecursionError):
        return MALFORMED, None
    if not strict_text_ok(text):  # the pandas reference's check: lone surrogates, depth
        return MALFORMED, None
    for key in (path.split(".") if path else []):
        if not isinstance(value, dict) or key not in value:
            return MISSING, None
        value = value[key]
    if isinstance(value, str):
        return FOUND, value.encode("utf-8")
    return NOT_STRING, None


EXPLICIT = [
    # (doc, path, status, value)
    ('{"device":{"os":"ios"}}', "device.os", FOUND, "ios"),
    ('  {"device" : { "os" : "android" } }\n', "device.os", FOUND, "android"),
    ('{"device":{"os":""}}', "device.os", FOUND, ""),
    ('"top"', "", FOUND, "top"),
    ('{"a":1}', "", NOT_STRING, None),
    ('{"a":"x"}', "a", FOUND, "x"),
    ('{"a":{"b":{"c":{"d":"deep"}}}}', "a.b.c.d", FOUND, "deep"),
    ('{"a":{"b":{"c":{"d":"deep"}}}}', "a.b.c", NOT_STRING, None),
    ('{"a":{"b":{"c":{"d":"deep"}}}}', "a.b.x", MISSING, None),
    ('{"a":{"b":{"c":{"d":"deep"}}}}', "a.b.c.d.e", MISSING, None),
    ('{"a":["x"]}', "a.0", MISSING, None),
    ('["a"]', "a", MISSING, None),
    ('"s"', "a", MISSING, None),
    ('{"a":"s"}', "a.b", MISSING, None),
    ('{"a":null}', "a", NOT_STRING, None),
    ('{"a":true}', "a", NOT_STRING, None),
    ('{"a":-0}', "a", NOT_STRING, None),
    ('{"a":1e5}', "a", NOT_STRING, None),
    ('{"a":-1.25E-7}', "a", NOT_STRING, None),
    ('{"a":123456789012345678901234567890}', "a", NOT_STRING, None),
    ('{"a":[]}', "a", NOT_STRING, None),
    ('{"a":{}}', "a", NOT_STRING, None),
    ('{"a":{}}', "a.b", MISSING, None),
    ('{}', "a", MISSING, None),
    ('{"a":"x\\"y\\\\z\\/w\\b\\f\\n\\r\\t"}', "a", FOUND, 'x"y\\z/w\b\f\n\r\t'),
    ('{"a":"\\u00e9\\u4e2d\\ud83d\\ude00"}', "a", FOUND, "é中😀"),
    ('{"a":"\\u0000"}', "a", FOUND, "\x00"),
    ('{"a":"é中😀"}', "a", FOUND, "é中😀"),
    ('{"dev\\u0069ce":{"os":"x"}}', "device.os", FOUND, "x"),
    ('{"a":"1","a":"2"}', "a", FOUND, "2"),
    ('{"a":"1","a":2}', "a", NOT_STRING, None),
    ('{"a":{"b":"x"},"a":5}', "a.b", MISSING, None),
    ('{"a":{"b":"x"},"a":{"c":"y"}}', "a.b", MISSING, None),
    ('{"a":{"b":"x"},"a":{"b":"y"}}', "a.b", FOUND, "y"),
    ('{"a":5,"a":{"b":"y"}}', "a.b", FOUND, "y"),
    ('{"a":{"b":"x","b":{"z":1}}}', "a.b", NOT_STRING, None),
    ('{"a":"\\udfff","a":"ok"}', "a", MALFORMED, None),  # overwritten, still malformed
    ('{"a":["\\ud800"],"a":"ok"}', "a", MALFORMED, None),
    ('{"a":' + "[" * 70 + "]" * 70 + ',"a":"ok"}', "a", MALFORMED, None),
    ('{"a":"\\\\udfff"}', "a", FOUND, "\\udfff"),  # escaped backslash, then text
    ('{"x":{"a":"no"},"a":"yes"}', "a", FOUND, "yes"),
    ('{"a":{"a":{"a":"in"}}}', "a.a.a", FOUND, "in"),
    ('{"":{"":"e"}}', ".", FOUND, "e"),
    ('{"a":{"":{"b":"e"}}}', "a..b", FOUND, "e"),
    # malformed
    ('', "a", MALFORMED, None),
    ('   ', "a", MALFORMED, None),
    ('{"a":"x"} x', "a", MALFORMED, None),
    ('{"a":"x"}{}', "a", MALFORMED, None),
    ('{"a":"x",}', "a", MALFORMED, None),
    ('{"a":"x"', "a", MALFORMED, None),
    ('{"a":"x}', "a", MALFORMED, None),
    ("{'a':'x'}", "a", MALFORMED, None),
    ('{a:"x"}', "a", MALFORMED, None),
    ('{"a":01}', "a", MALFORMED, None),
    ('{"a":1.}', "a", MALFORMED, None),
    ('{"a":.5}', "a", MALFORMED, None),
    ('{"a":+1}', "a", MALFORMED, None),
    ('{"a":1e}', "a", MALFORMED, None),
    ('{"a":-}', "a", MALFORMED, None),
    ('{"a":NaN}', "a", MALFORMED, None),
    ('{"a":Infinity}', "a", MALFORMED, None),
    ('{"a":tru}', "a", MALFORMED, None),
    ('{"a":True}', "a", MALFORMED, None),
    ('{"a":"x\\q"}', "a", MALFORMED, None),
    ('{"a":"x\\u12"}', "a", MALFORMED, None),
    ('{"a":"\\ud800"}', "a", MALFORMED, None),
    ('{"a":"\\udc00"}', "a", MALFORMED, None),
    ('{"a":"\\ud800\\u0041"}', "a", MALFORMED, None),
    ('{"a":"tab\there"}', "a", MALFORMED, None),
    ('{"a":"x\x1fy"}', "a", MALFORMED, None),
    ('{"a":"x\x00y"}', "a", MALFORMED, None),
    ('{"a":"x\x7fy"}', "a", FOUND, "x\x7fy"),
    ('{"a":"x"} // c', "a", MALFORMED, None),
    ('/* c */ {"a":"x"}', "a", MALFORMED, None),
    ('{"a":"x"]', "a", MALFORMED, None),
    ('["a"}', "a", MALFORMED, None),
    ('[1,]', "a", MALFORMED, None),
    ('[,1]', "a", MALFORMED, None),
    ('{"a" "x"}', "a", MALFORMED, None),
    ('{"a":"x" "b":"y"}', "a", MALFORMED, None),
    ('{,}', "a", MALFORMED, None),
    ('\ufeff{"a":"x"}', "a", MALFORMED, None),
    ('{"a":"x"}\x0b', "a", MALFORMED, None),
    # found early, broken later: still malformed
    ('{"device":{"os":"ios"},"geo":{', "device.os", MALFORMED, None),
    ('{"device":{"os":"ios"}} garbage', "device.os", MALFORMED, None),
    ('{"device":{"os":"ios"},"x":[1,2,}', "device.os", MALFORMED, None),
]


@pytest.mark.parametrize("doc,path,status,value", EXPLICIT)
def test_explicit_cases(lib, doc, path, status, value):
    want = (status, value.encode("utf-8") if value is not None else None)
    assert oracle(doc.encode("utf-8"), path) == want, "the oracle disagrees with the case"
    assert c_get(lib, [doc.encode("utf-8")], path)[0] == want


def test_invalid_utf8_is_malformed(lib):
    docs = [b'{"a":"\xff"}', b'{"a":"\xc0\xaf"}', b'{"a":"\xed\xa0\x80"}',
            b'{"a":"\xf4\x90\x80\x80"}', b'{"a":"\xe4\xb8"}', b'{"a":"\x80"}',
            b'{"a":"x"}\xc3\xa9']
    assert [oracle(d, "a")[0] for d in docs] == [MALFORMED] * len(docs)
    assert [s for s, _ in c_get(lib, docs, "a")] == [MALFORMED] * len(docs)
    ok = [b'{"a":"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\x7f"}']
    assert c_get(lib, ok, "a") == [oracle(ok[0], "a")] == [(FOUND, ok[0][6:-2])]


def test_depth_limit(lib):
    def nested(depth: int) -> bytes:
        return ("[" * (depth - 1) + '{"a":"x"}' + "]" * (depth - 1)).encode()
    assert c_get(lib, [nested(MAX_DEPTH)], "")[0][0] == NOT_STRING
    assert c_get(lib, [nested(MAX_DEPTH + 1)], "")[0][0] == MALFORMED
    deep_obj = ('{"a":' * MAX_DEPTH + '"v"' + "}" * MAX_DEPTH).encode()
    assert c_get(lib, [deep_obj], ".".join(["a"] * MAX_DEPTH)) == [(FOUND, b"v")]
    too_deep = ('{"a":' * (MAX_DEPTH + 1) + '"v"' + "}" * (MAX_DEPTH + 1)).encode()
    assert c_get(lib, [too_deep], "a")[0][0] == MALFORMED
    assert c_get(lib, [b"[" * 5000], "")[0][0] == MALFORMED
    for d in (nested(MAX_DEPTH), nested(MAX_DEPTH + 1), deep_obj, too_deep):
        assert oracle(d, "")[0] == c_get(lib, [d], "")[0][0]


# ---------------------------------------------------------------- randomized corpus

WORDS = ["device", "os", "geo", "city", "a", "b", "x", "", "dev.ice", "é", "中文", "😀",
         "q\"uote", "back\\slash", "tab\t", "nl\n", "\x01ctl", "\u2028", "ios", "android"]


def _rand_str(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(WORDS)
    return "".join(rng.choice("abc é中😀\"\\/\b\f\n\r\t\x00\x1f\x7f\ud7ff\ue000\U0010ffff")
                   for _ in range(rng.randint(0, 8)))


def _enc_str(rng: random.Random, s: str) -> str:
    """JSON string literal, escaping each character in a randomly chosen valid way."""
    out = ['"']
    for ch in s:
        cp = ord(ch)
        r = rng.random()
        if ch == '"' or ch == "\\" or cp < 0x20:
            short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                     "\r": "\\r", "\t": "\\t"}.get(ch)
            out.append(short if short and r < 0.5 else f"\\u{cp:04x}")
        elif ch == "/" and r < 0.5:
            out.append("\\/")
        elif r < 0.2:
            if cp >= 0x10000:
                v = cp - 0x10000
                out.append(f"\\u{0xD800 + (v >> 10):04X}\\u{0xDC00 + (v & 0x3FF):04x}")
            else:
                out.append(f"\\u{cp:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _ws(rng: random.Random) -> str:
    return "" if rng.random() < 0.7 else "".join(rng.choice(" \t\n\r") for _ in range(rng.randint(1, 3)))


def _rand_number(rng: random.Random) -> str:
    return rng.choice(["0", "-0", "1", "-1", "1e5", "1E+5", "2e-3", "0.5", "-0.0", "12.75e10",
                       str(rng.randint(-10**6, 10**6)), "9" * 40, "-123456789012345678901234",
                       f"{rng.random():.17g}", "1.5E308", "4e-320"])


def _rand_value(rng: random.Random, depth: int) -> str:
    """Text of a random JSON value; objects may carry duplicate keys."""
    r = rng.random()
    if depth > 6 or r < 0.35:
        return _enc_str(rng, _rand_str(rng))
    if r < 0.5:
        return rng.choice([_rand_number(rng), "true", "false", "null"])
    if r < 0.62:
        items = [_rand_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
        return "[" + _ws(rng) + ("," + _ws(rng)).join(items) + _ws(rng) + "]"
    keys = [rng.choice(["device", "os", "geo", "city", "a", "b"]) if rng.random() < 0.7
            else _rand_str(rng) for _ in range(rng.randint(0, 5))]
    parts = [_ws(rng) + _enc_str(rng, k) + _ws(rng) + ":" + _ws(rng) + _rand_value(rng, depth + 1)
             for k in keys]
    return "{" + ",".join(parts) + _ws(rng) + "}"


def _ctx_doc(rng: random.Random) -> str:
    """Documents shaped like the workload's ctx column."""
    d = {"device": {"os": rng.choice(["ios", "android", "é", ""]), "model": f"m{rng.randint(0, 99)}"},
         "geo": {"city": f"c{rng.randint(0, 500)}", "lat": rng.random()}, "v": rng.randint(0, 9)}
    if rng.random() < 0.2:
        del d["geo"]
    if rng.random() < 0.2:
        del d["device"]["os"]
    return json.dumps(d, ensure_ascii=rng.random() < 0.5)


def _mutate(rng: random.Random, s: bytes) -> bytes:
    """A random edit that usually (not always) breaks the document."""
    if not s:
        return rng.choice([b"{", b"x", b'"'])
    i = rng.randrange(len(s))
    op = rng.randrange(6)
    junk = rng.choice([b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"0", b" ", b"x",
                       b"\x01", b"\x1f", b"\x00", b"\xff", b"'", b".", b"e", b"-"])
    if op == 0:
        return s[:i]
    if op == 1:
        return s[:i] + s[i + 1:]
    if op == 2:
        return s[:i] + junk + s[i:]
    if op == 3:
        return s[:i] + junk + s[i + 1:]
    if op == 4:
        return s + rng.choice([b",", b"}", b" x", b"0", b"\n", b"{}"])
    return rng.choice([b"[", b"{", b'"', b" "]) + s


def _paths_of(rng: random.Random, doc: bytes) -> list[str]:
    """Some paths that exist in doc (when it parses), plus ones that do not."""
    paths = ["device.os", "geo.city", "a", "a.b", "", "device", "x.y.z", "."]
    try:
        v = json.loads(doc.decode("utf-8"))
    except Exception:
        return paths
    for _ in range(3):
        keys, cur = [], v
        while isinstance(cur, dict) and cur and rng.random() < 0.85:
            k = rng.choice(list(cur))
            if "." in k:
                break
            keys.append(k)
            cur = cur[k]
        path = ".".join(keys)
        if path.encode("utf-8", "replace").decode("utf-8") == path:  # no lone surrogates
            paths.append(path)
    return paths


def test_randomized_corpus_against_oracle(lib):
    rng = random.Random(2024)
    docs: list[bytes] = []
    for i in range(6000):
        if i % 3 == 0:
            d = _ctx_doc(rng).encode("utf-8")
        else:
            d = (_ws(rng) + _rand_value(rng, 0) + _ws(rng)).encode("utf-8")
        if rng.random() < 0.4:
            for _ in range(rng.randint(1, 2)):
                d = _mutate(rng, d)
        docs.append(d)
    by_path: dict[str, list[bytes]] = {}
    for d in docs:
        for p in _paths_of(rng, d):
            by_path.setdefault(p, []).append(d)
    seen_status: dict[int, int] = {}
    checked = 0
    for path, group in by_path.items():
        got = c_get(lib, group, path)
        for d, g in zip(group, got):
            want = oracle(d, path)
            assert g == want, f"doc={d!r} path={path!r}: C {g} != oracle {want}"
            seen_status[g[0]] = seen_status.get(g[0], 0) + 1
            checked += 1
    assert checked > 40000
    # Every status code is exercised in volume by the random corpus.
    assert all(seen_status.get(s, 0) > 500 for s in (FOUND, MALFORMED, MISSING, NOT_STRING)), seen_status


def test_ctx_column_shape(lib):
    rng = random.Random(3)
    docs = [_ctx_doc(rng).encode() for _ in range(2000)]
    docs += [_mutate(rng, d) for d in docs[:200]]
    for path in ("device.os", "geo.city"):
        assert c_get(lib, docs, path) == [oracle(d, path) for d in docs]


def test_pandas_reference_follows_the_same_rules(lib):
    """benchmarks/workload_pandas.py (the pandas reference of the workload) extracts JSON
    fields by the same rules as this header: "" exactly where the C says not found."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "workload_pandas.py"
    spec = importlib.util.spec_from_file_location("workload_pandas_for_json", path)
    wp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wp)

    rng = random.Random(11)
    docs = [_ctx_doc(rng).encode() for _ in range(1500)]
    docs += [(_ws(rng) + _rand_value(rng, 0) + _ws(rng)).encode() for _ in range(1500)]
    docs += [_mutate(rng, d) for d in docs[:1500]]
    docs += [d.encode() for d, _, _, _ in EXPLICIT]
    docs = [d for d in docs if _utf8(d)]  # the pandas input is a str column
    for p in ("device.os", "geo.city", "a", "a.b"):
        got = c_get(lib, docs, p)
        keys = tuple(p.split("."))
        for d, (st, val) in zip(docs, got):
            want = val.decode("utf-8") if st == FOUND else ""
            assert wp.json_fields(d.decode("utf-8"), (keys,)) == (want,), (d, p)


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
