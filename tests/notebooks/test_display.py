"""Notebook displays: the plan's layered graph, PipelineResult and TrialResult as HTML."""

from __future__ import annotations

import base64
import io
import re

import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from fbrapids import ops  # noqa: E402
from fbrapids.app.pipeline import PipelineResult  # noqa: E402
from fbrapids.app.trials import TrialResult  # noqa: E402
from fbrapids.datasets.synthetic import views as workload  # noqa: E402
from fbrapids.features import plan_for  # noqa: E402
from fbrapids.features.plan_graph import BOX_W, Explanation, layout, plan_graph, to_svg  # noqa: E402


@pytest.fixture(scope="module")
def workload_plan(tmp_path_factory):
    from fbrapids.datasets.synthetic.generate import generate
    from fbrapids.views.inputs import prepare

    d = tmp_path_factory.mktemp("g")
    generate(600, d, seed=1)
    joined = workload.join_views(*workload.clean_views(workload.read_views(d, eager=True)))
    return plan_for(prepare(joined, workload.features()), workload.features())


def _crossings(graph) -> int:
    edges = [(graph.pos[a], graph.pos[n.id]) for n in graph.nodes for a in n.args]
    count = 0
    for i, ((ax1, ay1), (bx1, by1)) in enumerate(edges):
        for (ax2, ay2), (bx2, by2) in edges[i + 1:]:
            if ay1 == ay2 and by1 == by2 and (ax1 - ax2) * (bx1 - bx2) < 0:
                count += 1
    return count


def test_layered_graph_of_the_workload_plan(workload_plan):
    plan = workload_plan
    g = plan_graph(plan)
    assert len(g.nodes) == len(plan.nodes) and len(g.rows) == len(plan.layers) + 1
    by_id = {n.id: n for n in g.nodes}
    for n in g.nodes:
        for a in n.args:  # every edge points down, into a later row
            assert by_id[a].row < n.row and g.pos[a][1] < g.pos[n.id][1]
    boxes = sorted(g.pos.values())
    for (x1, y1), (x2, y2) in zip(boxes, boxes[1:]):
        assert y1 != y2 or x2 - x1 >= BOX_W  # no two boxes overlap in a row
    kinds = {n.label.split("(")[0]: n.kind for n in g.nodes if n.kind != "input"}
    assert kinds["hash_bucket"] == "hash" and kinds["cross"] == "cross" and kinds["split"] == "string"
    assert kinds["bucketize"] == "scalar" and kinds["ngrams"] == "list"
    shared = [n for n in g.nodes if n.kind != "input" and n.shared > 1]
    assert {n.label.split(",")[0] for n in shared} >= {"hour(ts)", "split(query"}  # computed once, used twice
    unordered = plan_graph(plan)
    unordered.pos.clear()
    layout(unordered, sweeps=0)
    assert _crossings(g) <= _crossings(unordered)

    svg = to_svg(g)
    assert svg.count('<g class="node') == len(plan.nodes)
    assert svg.count('class="node shared"') == len(shared)
    assert svg.count('class="edge"') == sum(len(n.args) for n in plan.nodes)
    assert svg.count('class="row"') == len(plan.layers) + 1
    for name in plan.outputs:
        assert re.search(rf"→ [^<]*\b{re.escape(name)}\b", svg), name
    assert 'data-placement="cpu"' in svg and "host (C/OpenMP)" in svg and "frame column" in svg


def test_explain_text_is_unchanged_and_shows_the_graph():
    df = pd.DataFrame({"q": ["a b", "c"], "ts": [0, 3600]})
    feats = {"t": ops.split("q", " "), "n": ops.length(ops.split("q", " ")), "h": ops.hour("ts")}
    plan = plan_for(df, feats)
    text = "fbrapids plan: 3 feature(s)\nlayer 0 ..."
    e = Explanation(text, plan)
    assert e == text and str(e) == text and e.splitlines()[0] == "fbrapids plan: 3 feature(s)"
    page = e._repr_html_()
    assert page.count('<g class="node') == len(plan.nodes) == 5
    assert "<pre>fbrapids plan: 3 feature(s)\nlayer 0 ...</pre>" in page


def _png_sizes(page: str) -> list[tuple[int, int]]:
    from PIL import Image

    out = []
    for data in re.findall(r'src="data:image/png;base64,([^"]+)"', page):
        img = Image.open(io.BytesIO(base64.b64decode(data)))
        assert len(img.convert("L").getcolors(maxcolors=1 << 16) or []) > 10  # drawn, not a blank image
        out.append(img.size)
    return out


def test_pipeline_result_html_tables_and_chart():
    r = PipelineResult("cpu", "dlrm", rows={"impressions read": 5000, "after clean": 4750, "trained": 4000},
                       seconds={"plan": 0.4, "extract+train": 6.5, "extract+evaluate": 1.1},
                       metrics={"auc": 0.71, "gauc": 0.64, "n": 750},
                       store={"cache": {"hit_rate": 0.5, "hits": 10, "misses": 10, "evictions": 2, "bytes_moved": 640},
                              "ssd": {"hit_rate": 0.25, "hits": 1, "misses": 3, "evictions": 0, "bytes_moved": 64}},
                       kernel={"layers": 3, "launches": 12})
    page = r._repr_html_()
    assert "<td>impressions read</td><td>5,000</td>" in page and "<td>after clean</td><td>4,750</td>" in page
    assert "<td>cache</td><td>0.5000</td><td>10</td>" in page and "<td>ssd</td><td>0.2500</td>" in page
    assert "<td>auc</td><td>0.7100</td>" in page and "<td>launches</td><td>12</td>" in page
    assert len(_png_sizes(page)) == 1 and 'alt="seconds per stage"' in page
    assert r.render().startswith("fbrapids pipeline — backend cpu, model dlrm")  # the text form is unchanged


def test_trial_result_html():
    r = TrialResult(["slot_x_os"], {"auc": 0.70, "gauc": 0.61}, {"auc": 0.712, "gauc": 0.607},
                    delta={"auc": 0.012, "gauc": -0.003}, interval={"auc": (0.004, 0.02), "gauc": (-0.01, 0.002)},
                    p_better={"auc": 0.99, "gauc": 0.2}, n_boot=50, n_users=300, seeds=[0, 1, 2],
                    verdict={"auc": "helps", "gauc": "no detectable effect"}, aa_spread={"auc": 0.004, "gauc": 0.005})
    page = r._repr_html_()
    assert "3 seed(s) per arm" in page and "<td>helps</td><td>0.0040</td>" in page
    assert "<td>AUC</td><td>0.7000</td><td>0.7120</td><td>0.0120</td><td>0.0040</td><td>0.0200</td>" in page
    assert "<td>GAUC</td>" in page and "50 bootstrap rounds over 300 held-out users" in page
    assert len(_png_sizes(page)) == 1 and 'alt="trial deltas"' in page


def test_many_candidates_html_ranks_them_per_metric():
    from fbrapids.app.trial_family import CandidateTrials

    def one(name, auc, gauc, verdict):
        both = {"auc": auc, "gauc": gauc}
        return TrialResult([name], {"auc": 0.7, "gauc": 0.6}, {}, delta=both,
                           interval={m: (v - 0.002, v + 0.002) for m, v in both.items()}, p_value={"auc": 0.001, "gauc": 0.2},
                           p_family={"auc": 0.002, "gauc": 0.3}, p_adjusted={"auc": 0.004, "gauc": 0.6},
                           verdict={"auc": verdict, "gauc": "no detectable effect"})

    fam = CandidateTrials({"a": one("a", 0.001, 0.004, "no detectable effect"), "b": one("b", 0.009, -0.001, "helps")},
                          "holm", seeds=[0, 1, 2], n_boot=50, n_users=300)
    page = fam._repr_html_()
    auc, gauc = page.split("<h5>GAUC</h5>")
    assert auc.index("<td>b</td><td>0.0090</td>") < auc.index("<td>a</td>")  # ranked by delta, per metric
    assert gauc.index("<td>a</td><td>0.0040</td>") < gauc.index("<td>b</td>")
    assert "<td>0.0010</td><td>0.0020</td><td>0.0040</td><td>helps</td>" in auc and "Holm" in page
    assert len(_png_sizes(page)) == 1 and fam.ranking("gauc") == ["a", "b"] and fam.helps() == ["b"]
    assert "  1  b" in fam.render() and "Holm's step-down method" in fam.render()


def test_explain_and_featureset_show_graphs_in_notebooks():
    from fbrapids.features import FeatureSet, explain

    df = pd.DataFrame({"q": ["a b", "c"], "ts": [0, 3600], "cat": [1, 2]})
    toks = ops.split("q", " ", buckets=1 << 10)
    fs = FeatureSet("demo", t=toks, x=ops.cross(toks, "cat"), h=ops.hour("ts"))
    text = explain(df, fs)
    assert isinstance(text, str) and text.startswith("fbrapids plan: 3 feature(s)")
    page = text._repr_html_()
    plan = plan_for(df, fs.features)
    assert page.count('<g class="node') == len(plan.nodes)
    assert page.count('class="node shared"') == 1  # the token list, used by t and x
    assert "<summary>as text</summary>" in page and "layer 1 [cpu]" in page
    assert fs.explain(df) == text and repr(fs) == "FeatureSet('demo', t, x, h)"
    fs_page = fs._repr_html_()
    assert fs_page.count('<g class="node') == 6  # q, ts, cat, split, cross, hour: each once
    assert fs_page.count('class="node shared"') == 1 and "placed when a frame is planned" in fs_page
