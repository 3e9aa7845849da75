"""Every built-in operator against a straightforward Python reference, on random input and
on the real samples in ../shared/data; TensorFlow's hash test vectors."""

from __future__ import annotations

import datetime as dt
import math
import random
from pathlib import Path

import farmhash
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops
from fbrapids.errors import ReplacedColumnWarning

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
LIST_I64 = pd.ArrowDtype(pa.list_(pa.int64()))
LIST_STR = pd.ArrowDtype(pa.list_(pa.string()))


def fp(s) -> int:
    return farmhash.fingerprint64(s)


def hb(x, b):
    return fp(str(x)) % b


def tokens(s, sep):
    return [t for t in s.split(sep) if t]


BACKEND = {"name": "cpu"}


@pytest.fixture(autouse=True, params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request):
    """Every reference test runs on the CPU backend and, where there is one, on the GPU."""
    BACKEND["name"] = request.param
    yield request.param
    BACKEND["name"] = "cpu"


def ex(df, **f):
    """``df.fbx.extract(**f)`` on the backend in force; GPU results come back as pandas
    through Arrow types (ints with nulls stay ints)."""
    if BACKEND["name"] == "cpu":
        return df.fbx.extract(**f)
    from fbrapids.frames.backend import get_backend, is_gpu_object, to_backend

    out = to_backend(df, get_backend("gpu")).fbx.extract(**f)
    assert is_gpu_object(out)
    return out.to_pandas(arrow_type=True)


def col_list(s: pd.Series) -> list:
    return [None if (v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA) else
            (list(v) if hasattr(v, "__len__") and not isinstance(v, str) else v) for v in s.tolist()]


@pytest.fixture(scope="module")
def rand_strings():
    rng = random.Random(7)
    alphabet = "abcXYZ019 _|-é漢😀"
    out = []
    for i in range(10_000):
        k = rng.choice([0, 1, 3, 8, 17, 33, 65, 200, 1500])
        out.append("".join(rng.choice(alphabet) for _ in range(k)))
    return out


# -- hashing (TensorFlow vectors) ------------------------------------------------------
def test_tf_fingerprint_vectors():
    df = pd.DataFrame({"s": ["Hello", "World", ""]})
    out = ex(df, h=ops.hash("s"))["h"].tolist()
    assert out == [15404698994557526151, 18308117990299812472, 11160318154034397263]


def test_tf_hash_bucket_vectors():
    df = pd.DataFrame({"s": ["a", "b", "c", "d"]})
    assert ex(df, h=ops.hash_bucket("s", 10))["h"].tolist() == [9, 2, 2, 5]
    df3 = pd.DataFrame({"s": ["Hello", "TensorFlow", "2.x"]})
    assert ex(df3, h=ops.hash_bucket("s", 3))["h"].tolist() == [0, 2, 2]


def test_integers_hash_as_decimal_text():
    vals = [0, -1, 42, 2**63 - 1, -(2**63), 123456789]
    df = pd.DataFrame({"i": np.array(vals, dtype=np.int64), "u": np.array([0, 1, 2**64 - 1, 7, 10, 99], dtype=np.uint64)})
    out = ex(df, a=ops.hash("i"), b=ops.hash_bucket("i", 1000), c=ops.hash("u"))
    assert out["a"].tolist() == [fp(str(v)) for v in vals]
    assert out["b"].tolist() == [hb(v, 1000) for v in vals]
    assert out["c"].tolist() == [fp(str(int(v))) for v in df["u"]]


def test_agrees_with_pyfarmhash_on_10k_random_strings(rand_strings):
    assert any(len(s.encode()) > 1024 for s in rand_strings) and "" in rand_strings
    df = pd.DataFrame({"s": pd.Series(rand_strings, dtype="str")})
    out = ex(df, h=ops.hash("s"), b=ops.hash_bucket("s", 1 << 20))
    assert out["h"].tolist() == [fp(s) for s in rand_strings]
    assert out["b"].tolist() == [fp(s) % (1 << 20) for s in rand_strings]


# -- scalar ops --------------------------------------------------------------------------
def test_scalar_ops_random():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 50, 3000)
    x[rng.random(3000) < 0.1] = np.nan
    ts = rng.integers(-10**9, 4 * 10**9, 3000)
    df = pd.DataFrame({"x": x, "ts": ts, "i": rng.integers(-100, 100, 3000).astype(np.int32)})
    out = ex(df, f=ops.fill_null("x", -7.5), l=ops.log1p(ops.fill_null(ops.clip("x", 0, 1e9), 0)),
             c=ops.clip("i", -10, 10), b=ops.bucketize("x", [-10, 0, 0, 25.5]),
             h=ops.hour("ts"), w=ops.weekday("ts"), d=ops.day("ts"), k=ops.cast("x", "i32"))
    nan = np.isnan(x)
    assert np.array_equal(out["f"].to_numpy(), np.where(nan, -7.5, x))
    ref_l = [math.log1p(min(max(v, 0), 1e9)) if not math.isnan(v) else 0.0 for v in x]
    assert out["l"].tolist() == ref_l
    assert out["c"].tolist() == [min(max(int(v), -10), 10) for v in df["i"]]
    ref_b = [None if math.isnan(v) else int(np.searchsorted([-10, 0, 0, 25.5], v, side="right")) for v in x]
    assert col_list(out["b"]) == ref_b
    utc = [dt.datetime.fromtimestamp(int(t), dt.timezone.utc) for t in ts]
    assert out["h"].tolist() == [u.hour for u in utc]
    assert out["w"].tolist() == [u.weekday() for u in utc]
    assert out["d"].tolist() == [u.day for u in utc]
    assert col_list(out["k"]) == [None if math.isnan(v) else int(v) for v in x]


# -- strings and lists -------------------------------------------------------------------
def _ref_substring(s, start, length):
    n = len(s)
    if start < 0:
        start = max(n + start, 0)
    return s[start:] if length is None else s[start:start + length]


def test_string_ops_random(rand_strings):
    rng = random.Random(3)
    ss = [s if rng.random() > 0.05 else None for s in rand_strings[:3000]]
    df = pd.DataFrame({"s": pd.Series(ss, dtype="str")})
    out = ex(df, sp=ops.split("s", " "), sph=ops.split("s", "|", buckets=1000), sp0=ops.split("s", "ab", buckets=0),
             ln=ops.length("s"), lo=ops.lower("s"), su=ops.substring("s", 2, 5), sn=ops.substring("s", -3),
             f=ops.fill_null("s", "∅"), nl=ops.length(ops.split("s", " ")))
    for i, s in enumerate(ss):
        if s is None:
            for c in ("sp", "sph", "ln", "lo", "su", "sn", "nl"):
                assert col_list(out[c])[i] is None, c
            assert out["f"][i] == "∅"
            continue
        assert list(out["sp"][i]) == tokens(s, " ")
        assert list(out["sph"][i]) == [fp(t) % 1000 for t in tokens(s, "|")]
        assert list(out["sp0"][i]) == [fp(t) for t in tokens(s, "ab")]
        assert out["ln"][i] == len(s.encode())
        assert out["lo"][i] == s.encode().lower().decode()
        assert out["su"][i] == _ref_substring(s, 2, 5)
        assert out["sn"][i] == _ref_substring(s, -3, None)
        assert out["f"][i] == s
        assert out["nl"][i] == len(tokens(s, " "))


def test_list_ops_random():
    rng = random.Random(5)
    words = ["a", "bb", "c c", "é", "", "zz|z"]
    lists = [[rng.choice(words) for _ in range(rng.randrange(0, 9))] if rng.random() > 0.05 else None for _ in range(2000)]
    ints = [[rng.randrange(-5, 10**12) for _ in range(rng.randrange(0, 7))] if rng.random() > 0.05 else None for _ in range(2000)]
    df = pd.DataFrame({"t": pd.Series(pd.arrays.ArrowExtensionArray(pa.array(lists, pa.list_(pa.string())))),
                       "v": pd.Series(pd.arrays.ArrowExtensionArray(pa.array(ints, pa.list_(pa.int64()))))})
    out = ex(df, g2=ops.ngrams("t", 2, "_"), g2h=ops.ngrams("t", 2, " ", buckets=977), f3=ops.first_k("t", 3),
             l2=ops.last_k("v", 2), f2=ops.first_k("v", 2), hv=ops.hash_bucket("v", 100), ht=ops.hash("t"),
             n=ops.length("v"), fl=ops.fill_null("v", []))
    for i, (t, v) in enumerate(zip(lists, ints)):
        if t is None:
            assert col_list(out["g2"])[i] is None and col_list(out["f3"])[i] is None
        else:
            assert list(out["g2"][i]) == ["_".join(t[j:j + 2]) for j in range(len(t) - 1)]
            assert list(out["g2h"][i]) == [fp(" ".join(t[j:j + 2])) % 977 for j in range(len(t) - 1)]
            assert list(out["f3"][i]) == t[:3]
            assert list(out["ht"][i]) == [fp(w) for w in t]
        if v is None:
            assert col_list(out["l2"])[i] is None and list(out["fl"][i]) == []
        else:
            assert list(out["l2"][i]) == v[-2:] if v else list(out["l2"][i]) == []
            assert list(out["f2"][i]) == v[:2]
            assert list(out["hv"][i]) == [hb(x, 100) for x in v]
            assert out["n"][i] == len(v)
            assert list(out["fl"][i]) == v


def test_cross_scalar_and_list_semantics():
    df = pd.DataFrame({"cat": np.array([17, -1, 3], dtype=np.int32), "city": pd.Series(["c42", "c42", ""], dtype="str"),
                       "q": pd.Series(["a b", "", "x y z"], dtype="str"), "t": pd.Series(["u v w", "k", "m"], dtype="str")})
    qh, th = ops.split("q", " ", buckets=2**18), ops.split("t", " ", buckets=2**18)
    out = ex(df, s=ops.cross("cat", "city", buckets=2**20), l=ops.cross(qh, th, buckets=2**20, cap=4),
             m=ops.cross("cat", ops.split("q", " "), "city", buckets=None, sep="#"))
    assert out["s"].tolist() == [hb("17_c42", 2**20), hb("-1_c42", 2**20), hb("3_", 2**20)]
    for i in range(3):
        a = [fp(w) % 2**18 for w in tokens(df["q"][i], " ")]
        b = [fp(w) % 2**18 for w in tokens(df["t"][i], " ")]
        assert list(out["l"][i]) == [hb(f"{x}_{y}", 2**20) for x in a for y in b][:4]
        c = [fp(f"{df['cat'][i]}#{w}#{df['city'][i]}") for w in tokens(df["q"][i], " ")]
        assert list(out["m"][i]) == c


def test_lookup_and_categorify():
    df = pd.DataFrame({"c": pd.Series(["x", "y", None, "z", "x", "x", "y"], dtype="str"),
                       "i": np.array([5, 6, 7, 5, 5, 9, 6], dtype=np.int64)})
    out = ex(df, a=ops.lookup("c", {"x": 10, "y": 20}, oov=-1), b=ops.lookup("i", [6, 5]))
    assert out["a"].tolist() == [10, 20, -1, -1, 10, 10, 20]
    assert out["b"].tolist() == [2, 1, 0, 2, 2, 0, 1]
    # categorify is fitted (ids: 0 padding, 1 null, 2 out of vocabulary, then by count)
    with pytest.warns(ReplacedColumnWarning, match="feature 'c' replaces the input column 'c'"):
        out = df.fbx.extract(df.fbx.fit(c=ops.categorify("c", min_freq=2), d=ops.categorify("i")))
    assert out["c"].tolist() == [3, 4, 1, 2, 3, 3, 4]  # x(3) -> 3, y(2) -> 4, null 1, z(1) dropped: OOV 2
    assert out["d"].tolist() == [3, 4, 5, 3, 3, 6, 4]  # 5(3), 6(2), then 7, 9 by value


def test_json_get_matches_strict_reference():
    docs = ['{"device": {"os": "ios"}, "geo": {"city": "c\\u00e9"}}', '{"device": {"os": 3}}', "{bad", None,
            '{"device": {}}', '  {"device": {"os": "a\\"b"}}  ', '{"device": {"os": "x"}} trailing', "[]",
            '{"device": {"os": "NaN"}, "x": NaN}']
    df = pd.DataFrame({"ctx": pd.Series(docs, dtype="str")})
    out = ex(df, os=ops.json_get("ctx", "device.os"), city=ops.json_get("ctx", "geo.city"))
    assert col_list(out["os"]) == ["ios", None, None, None, None, 'a"b', None, None, None]
    assert col_list(out["city"]) == ["cé", None, None, None, None, None, None, None, None]


# -- real samples ------------------------------------------------------------------------
def _need_data():
    if not DATA.exists():
        pytest.skip(f"real samples not found at {DATA} (../shared/data)")


def test_real_criteo_avazu_taobao():
    _need_data()
    cri = pd.read_csv(DATA / "criteo_sample.txt", dtype_backend="pyarrow")
    cats = [c for c in cri.columns if c.startswith("C")]
    feats = {f"h_{c}": ops.hash_bucket(c, 1000) for c in cats[:8]}
    feats["x"] = ops.cross(cats[0], cats[1], buckets=4096)
    feats["b"] = ops.bucketize(ops.log1p(ops.fill_null(ops.clip("I1", 0, 1e9), 0)), [0, 1, 2, 3])
    out = ex(cri, **feats)
    for c in cats[:8]:
        assert col_list(out[f"h_{c}"]) == [None if v is None or v is pd.NA else fp(v) % 1000 for v in cri[c].tolist()]
    assert col_list(out["x"]) == [None if (a is pd.NA or b is pd.NA) else fp(f"{a}_{b}") % 4096
                                  for a, b in zip(cri[cats[0]].tolist(), cri[cats[1]].tolist())]
    i1 = [0 if v is pd.NA else min(max(v, 0), 1e9) for v in cri["I1"].tolist()]
    assert out["b"].tolist() == [int(np.searchsorted([0, 1, 2, 3], math.log1p(v), side="right")) for v in i1]

    av = pd.read_csv(DATA / "avazu_sample.txt", dtype={"id": np.uint64})
    out = ex(av, h=ops.hash("id"), s=ops.hash_bucket("site_id", 100))
    assert out["h"].tolist() == [fp(str(int(v))) for v in av["id"]]
    assert out["s"].tolist() == [fp(v) % 100 for v in av["site_id"].astype(str)]

    tb = pd.read_csv(DATA / "taobao_tiny_train.csv", dtype_backend="pyarrow")
    seq = ops.split(ops.fill_null("click_sequence", ""), "^")
    out = ex(tb, seq=seq, last=ops.last_k(seq, 3), n=ops.length(seq),
                         hh=ops.hash_bucket(ops.last_k(seq, 3), 1 << 16), ua=ops.cross("userid", "adgroup_id", buckets=977))
    raw = ["" if v is pd.NA or v is None else str(v) for v in tb["click_sequence"].tolist()]
    assert [list(v) for v in out["seq"]] == [tokens(s, "^") for s in raw]
    assert [list(v) for v in out["last"]] == [tokens(s, "^")[-3:] for s in raw]
    assert [list(v) for v in out["hh"]] == [[fp(w) % (1 << 16) for w in tokens(s, "^")[-3:]] for s in raw]
    assert out["ua"].tolist() == [hb(f"{u}_{a}", 977) for u, a in zip(tb["userid"].tolist(), tb["adgroup_id"].tolist())]


def test_nullable_ints_are_read_as_ints_with_validity():
    """pandas ``Int64`` / ``UInt64`` / ``int64[pyarrow]`` columns (and cudf ints with nulls,
    on the GPU run) reach the kernels as ints plus validity: values above 2^53 hash exactly
    and nulls stay null, never NaN turned into float bits."""
    vals = [2**53 + 1, None, -(2**62) - 3, 7, None, 2**63 - 1]
    uvals = [2**64 - 1, 2**53 + 1, None, 0, 5, None]
    df = pd.DataFrame({"i": pd.array(vals, dtype="Int64"), "u": pd.array(uvals, dtype="UInt64"),
                       "a": pd.Series(pd.arrays.ArrowExtensionArray(pa.array(vals, pa.int64()))),
                       "s": pd.array([1, None, 3, 4, 5, 6], dtype="Int8")})
    out = ex(df, hi=ops.hash("i"), bu=ops.hash_bucket("u", 1 << 20), ha=ops.hash("a"),
             c=ops.cross("i", "s", buckets=977), f=ops.fill_null("i", -1))
    assert col_list(out["hi"]) == [None if v is None else fp(str(v)) for v in vals]
    assert col_list(out["ha"]) == col_list(out["hi"])
    assert col_list(out["bu"]) == [None if v is None else hb(v, 1 << 20) for v in uvals]
    assert col_list(out["c"]) == [None if a is None or b is None else hb(f"{a}_{b}", 977)
                                  for a, b in zip(vals, [1, None, 3, 4, 5, 6])]
    assert [int(v) for v in out["f"].tolist()] == [-1 if v is None else v for v in vals]


def test_json_get_counts_with_null_inputs():
    """``clean``'s JSON counts (null input / malformed / missing / not a string) on the backend in force."""
    from fbrapids.frames.backend import get_backend, to_backend
    from fbrapids.views.clean import clean, clean_report

    docs = ['{"d": {"os": "ios"}}', None, "{bad", '{"d": {}}', '{"d": {"os": 3}}', None, '{"d": {"os": ""}}']
    df = pd.DataFrame({"ctx": pd.Series(docs, dtype="str"), "k": np.arange(7, dtype=np.int16)})
    df = to_backend(df, get_backend(BACKEND["name"]))
    out = clean(df, json={"ctx": {"os": "d.os"}}, fill={"os": "?"}, where="k != 6 or os != ''", drop=["ctx"])
    counts = clean_report(out).counts
    assert counts["json"]["ctx"] == {"rows": 7, "null_input": 2, "malformed": 1, "too_deep": 0, "missing:os": 1,
                                     "not_string:os": 1}
    assert counts["fill"] == {"os": 5} and counts["rows_in"] == 7 and counts["rows_out"] == 6
    host = out.to_pandas() if hasattr(out, "to_pandas") else out
    assert host["os"].tolist() == ["ios", "?", "?", "?", "?", "?"]
