"""Every figure in README.md, docs/*.md and the notebooks' prose is rendered from committed
JSON (scripts/docs_figures.py, `make docs-check`): re-rendering changes nothing, a figure
edited by hand is caught, and no measurement-like number is typed outside the generated
regions (a short, explicit allow-list names the constants)."""
from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import docs_figures  # noqa: E402


@pytest.mark.parametrize("name", docs_figures.DOCS)
def test_generated_regions_match_the_committed_json(name):
    text = (REPO / name).read_text()
    assert docs_figures.render(text) == text, f"{name} is stale: run python scripts/docs_figures.py"


@pytest.mark.parametrize("name", docs_figures.DOCS)
def test_no_figure_is_typed_by_hand(name):
    assert docs_figures.typed_figures(name, (REPO / name).read_text()) == []


def test_notebook_prose_has_no_typed_figures():
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        assert docs_figures.typed_figures(path.name, docs_figures.notebook_markdown(path)) == []


def test_every_region_is_used_and_every_allowed_phrase_still_exists():
    texts = {name: (REPO / name).read_text() for name in docs_figures.DOCS}
    used = {m.group("name") for text in texts.values() for m in docs_figures.REGION.finditer(text)}
    assert used == set(docs_figures.FIGURES)
    for doc, phrase, why in docs_figures.ALLOWED:  # a stale allow-list entry would hide nothing, or a new figure
        pattern = re.escape(phrase).replace(r"\n", r"\s*").replace(r"\ ", r"\s+")
        assert re.search(pattern, texts[doc]), (doc, phrase, why)


def test_a_hand_edited_figure_fails_the_check():
    readme = (REPO / "README.md").read_text()
    region = re.search(r"<!-- fig:demo-auc -->.*?<!-- /fig:demo-auc -->", readme, re.S).group(0)
    auc = re.search(r"0\.\d{4}", region).group(0)
    edited = readme.replace(region, region.replace(auc, f"{float(auc) + 0.0001:.4f}"))
    assert edited != readme and docs_figures.render(edited) == readme  # the edit is undone: the check fails
    # a measurement typed into the prose, outside any region, is flagged
    typed = readme.replace("## Operators and meta-kernels\n", "## Operators and meta-kernels\n\nExtraction takes 12.5 s.\n")
    assert [f for f in docs_figures.typed_figures("README.md", typed) if "12.5 s" in f]


def test_the_check_script_fails_on_a_stale_file(tmp_path, monkeypatch):
    stale = tmp_path / "README.md"
    stale.write_text("# x\n\n<!-- fig:demo-work-dir -->~1 MB at 10 rows<!-- /fig:demo-work-dir -->\n")
    monkeypatch.setattr(docs_figures, "REPO", tmp_path)
    monkeypatch.setattr(docs_figures, "DOCS", ["README.md"])
    (tmp_path / "notebooks").mkdir()
    assert docs_figures.main(["--check"]) == 1
    assert stale.read_text().startswith("# x")  # --check changes nothing


def test_figure_files_name_machine_command_and_date():
    for path in sorted((REPO / "benchmarks" / "results" / "figures").glob("*.json")):
        r = json.loads(path.read_text())
        assert "cores" in r["machine"] and r["command"] and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", r["measured_at"])
        assert not re.search(r'"/(tmp|home|root|work)/', path.read_text()), path  # no paths of the machine


def test_demo_and_trial_figures_are_on_todays_default_data():
    """The README's demo summary was made on the default data (the demo's default rows, seed
    0) and its trial figure on the default generator at seed 0 with the script's planted
    columns (a signal and a noise column: the truth known), both by the current generator."""
    from fbrapids.app.demo import run_demo
    from fbrapids.datasets.synthetic.generate import DATA_VERSION

    sys.path.insert(0, str(REPO / "scripts"))
    from make_readme_figure import SIGNAL_BETA

    rows = inspect.signature(run_demo).parameters["rows"].default
    demo = json.loads((REPO / "benchmarks/results/figures/demo.json").read_text())
    trial = json.loads((REPO / "benchmarks/results/figures/trial.json").read_text())
    assert demo["data"]["rows"] == rows and trial["rows"] == trial["data"]["rows"]
    assert demo["data"]["seed"] == trial["seed"] == trial["data"]["seed"] == 0
    assert {n: p["beta"] for n, p in trial["data"]["plant"].items()} == {"p_signal": SIGNAL_BETA, "p_noise": 0.0}
    assert demo["data"]["data_version"] == trial["data_version"] == DATA_VERSION, (
        "the generator changed since these figures: python scripts/docs_figures.py --run demo trial")


def test_a_results_file_of_another_shape_names_the_figure(monkeypatch):
    monkeypatch.setattr(docs_figures, "load", lambda rel: {"sizes": {}})  # e.g. a renamed key
    with pytest.raises(SystemExit, match="figure 'inference-table'.*fig_inference_table"):
        docs_figures.render("<!-- fig:inference-table --><!-- /fig:inference-table -->")
