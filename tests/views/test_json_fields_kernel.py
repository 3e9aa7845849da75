"""``extract_json`` (the clean step's JSON fields) through the json_get meta-kernel, against
Python's json module made strict, on varied and mutated documents."""

from __future__ import annotations

import json
import random

import pandas as pd

from fbrapids.views.json_fields import extract_json


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
