"""``extract_json`` (the clean step's JSON fields) through the json_scan / json_pick meta-kernel,
against Python's json module made strict, on varied, mutated, deep and generated documents."""

from __future__ import annotations

import itertools
import json
import random
import re

import pandas as pd
from hypothesis import HealthCheck, given, settings, strategies as st

from fbrapids.views.json_fields import extract_json, json_features


def _strict(doc):
    def bad(name):
        raise ValueError(name)
    try:
        return json.JSONDecoder(parse_constant=bad).decode(doc), True
    except (ValueError, RecursionError):
        return None, False


def _walk(v, path):
    for k in path.split("."):
        if not isinstance(v, dict) or k not in v:
            return None, "missing"
        v = v[k]
    return (v, "ok") if isinstance(v, str) else (None, "not_string")


def test_extract_json_matches_strict_python():
    rng = random.Random(11)
    docs = []
    for i in range(3000):
        d = {"device": {"os": rng.choice(["ios", "android", "hä\"rm\\ony", 3, None, "日本"])},
             "geo": rng.choice([{"city": f"c{i % 50}"}, {}, {"city": ["x"]}]), "v": rng.random()}
        if rng.random() < 0.1:
            del d["device"]
        text = json.dumps(d, ensure_ascii=rng.random() < 0.5)
        r = rng.random()
        if r < 0.05:
            text = text[: rng.randrange(len(text))]  # truncated: malformed
        elif r < 0.08:
            text = text + " x"
        elif r < 0.1:
            text = None
        docs.append(text)
    s = pd.Series(docs, dtype="str")
    paths = {"os": "device.os", "city": "geo.city"}
    cols, counts = extract_json(s, paths)
    want = {"rows": len(docs), "null_input": sum(d is None for d in docs), "malformed": 0, "too_deep": 0,
            "missing:os": 0, "not_string:os": 0, "missing:city": 0, "not_string:city": 0}
    for i, doc in enumerate(docs):
        parsed, ok = _strict(doc) if doc is not None else (None, True)
        if doc is not None and not ok:
            want["malformed"] += 1
        for name, path in paths.items():
            got = cols[name].iloc[i]
            if doc is None or not ok:
                assert pd.isna(got)
                continue
            v, st = _walk(parsed, path)
            if st != "ok":
                want[f"{st}:{name}"] += 1
                assert pd.isna(got)
            else:
                assert got == v
    assert counts == want


# -- several paths per column, one parse per document ------------------------------------------
# The oracle, written here from the module doc: json.loads made strict (NaN / Infinity refused,
# lone surrogates refused), the last duplicate key wins, and a document that nests deeper than
# 64 arrays / objects is counted as too_deep (by its brackets outside strings, even when malformed).

KEYS = ["a", "b", "c", "dé", "日"]
SCALARS = st.one_of(st.text(alphabet="ab\"\\/é日\U0001F600\n\x00 ", max_size=5), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)), max_leaves=12)
# a few fixed path sets (each set is one compiled kernel): one path; the same leaf under
# several parents and a path through another's value; 20 paths (five json_scan groups)
PATHS = st.sampled_from([
    ["a"],
    ["a.b", "b.a", "a", "dé.日.c"],
    [".".join(p) for p in [("a",), ("b",), ("c",), ("dé",), ("日",), ("a", "a"), ("a", "b"), ("b", "c"), ("c", "dé"),
                           ("dé", "日"), ("日", "a"), ("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b"), ("a", "a", "a"),
                           ("dé", "dé"), ("日", "日", "日"), ("b", "a", "dé"), ("c", "c"), ("a", "dé", "b")]],
])


_STRING = re.compile(r'"(?:[^"\\]|\\.|\\\Z)*(?:"|\Z)', re.S)  # a string, or one left open at the end


def _bracket_depth(text: str) -> int:
    """The deepest run of open '[' / '{' once the strings are cut out."""
    outside = _STRING.sub("", text)
    return max(itertools.accumulate((1 if ch in "[{" else -1 for ch in outside if ch in "[{]}"), initial=0))


def _has_lone_surrogate(v) -> bool:
    if isinstance(v, str):
        return any(0xD800 <= ord(ch) <= 0xDFFF for ch in v)
    if isinstance(v, list):
        return any(_has_lone_surrogate(x) for x in v)
    if isinstance(v, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(x) for k, x in v.items())
    return False


def _oracle(docs: list, paths: dict[str, str]) -> tuple[dict[str, list], dict[str, int]]:
    cols = {name: [] for name in paths}
    counts = {"rows": len(docs), "null_input": 0, "malformed": 0, "too_deep": 0}
    counts.update({f"{k}:{name}": 0 for name in paths for k in ("missing", "not_string")})
    for doc in docs:
        if doc is None:
            counts["null_input"] += 1
            parsed, bad = None, True
        else:
            parsed, ok = _strict(doc)
            bad = not ok or _has_lone_surrogate(parsed) or _bracket_depth(doc) > 64
            if bad:
                counts["too_deep" if _bracket_depth(doc) > 64 else "malformed"] += 1
        for name, path in paths.items():
            if bad:
                cols[name].append(None)
                continue
            v, status = _walk(parsed, path)
            cols[name].append(v)
            if status != "ok":
                counts[f"{status}:{name}"] += 1
    return cols, counts


@st.composite
def _documents(draw):
    text = json.dumps(draw(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4)),
                      ensure_ascii=draw(st.booleans()))
    kind = draw(st.sampled_from(["valid", "valid", "valid", "dup", "cut", "junk", "deep", "deep_bad", "null"]))
    if kind == "dup":  # a later duplicate key wins
        text = text[:-1] + (", " if text != "{}" else "") + f'"{draw(st.sampled_from(KEYS))}": ' \
            + json.dumps(draw(VALUES)) + "}"
    elif kind == "cut":
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif kind == "junk":
        text = draw(st.sampled_from([text + " x", text.replace('"', "'", 1), text[:-1] + ",}",
                                     '{"a": NaN}', '{"a": "\\ud800"}', '{"a": "x\ty"}', "\ufeff" + text]))
    elif kind in ("deep", "deep_bad"):
        k = draw(st.integers(62, 67))
        text = '{"a": ' + "[" * k + "]" * k + (", " if kind == "deep_bad" else "") + '}'
    elif kind == "null":
        return None
    return text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(_documents(), min_size=1, max_size=40), paths=PATHS)
def test_several_paths_match_strict_python(docs, paths):
    named = {f"p{i}": p for i, p in enumerate(paths)}  # up to 20 paths: five json_scan groups
    cols, counts = extract_json(pd.Series(docs, dtype="str"), named)
    want_cols, want_counts = _oracle(docs, named)
    assert counts == want_counts
    for name in named:
        assert [None if pd.isna(v) else v for v in cols[name]] == want_cols[name], name
        assert str(cols[name].dtype) == "str"


def test_each_document_is_parsed_once_per_four_paths():
    """Counted in the plan extract_json runs: the operators that walk a document (json_get,
    json_scan) number one per 4 paths; every output only copies out (json_pick of a scan)."""
    from fbrapids.kernels import build_plan

    for k, scans in ((1, 1), (2, 1), (4, 1), (5, 2), (20, 5)):
        plan = build_plan(json_features({f"p{i}": f"a.b{i}" for i in range(k)}), {"doc": "str"})
        parsing = [n for n in plan.nodes if n.op is not None and n.op.name in ("json_get", "json_scan")]
        assert len(parsing) == scans, k
        for name, nid in plan.outputs.items():
            out = plan.nodes[nid]
            assert out.op.name == "json_pick" and plan.nodes[out.args[1]].op.name == "json_scan", name


def test_values_past_what_a_code_holds_are_found_by_walking_again():
    """With 4 paths to a scan, a code holds offsets below 8 KiB: a value further into a long
    document is read by json_pick's own walk, with the same answer (and status)."""
    pad = "x" * 9000
    docs = [json.dumps({"pad": pad, "a": {"b": "far"}, "c": "é", "d": 1}), json.dumps({"a": {"b": "near"}, "pad": pad}),
            json.dumps({"pad": pad, "a": {"b": 2}}), json.dumps({"pad": pad}), None, json.dumps({"pad": pad})[:-1]]
    paths = {"ab": "a.b", "c": "c", "d": "d", "e": "pad"}
    cols, counts = extract_json(pd.Series(docs, dtype="str"), paths)
    want_cols, want_counts = _oracle(docs, paths)
    assert counts == want_counts
    assert {n: [None if pd.isna(v) else v for v in cols[n]] for n in paths} == want_cols
    assert want_cols["ab"][:2] == ["far", "near"] and want_cols["e"][0] == pad
