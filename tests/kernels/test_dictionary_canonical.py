"""The dictionary path on the canonical workload (``fbrapids.datasets.synthetic.views``, generated data):
bit-identical to the row path, and the FarmHash fingerprints it saves counted by the
kernels' counters (``hashes`` taken, ``hashes_saved``), never timed.

On this data, titles (one per ad) and interests (one per user) repeat across impressions:
their token hashes are computed once per distinct text.  With the dictionary path forced
on, the scalar hashes and crosses of ids, cities and categories are too; categorical
inputs (pandas ``category``) take it with their own codes.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fbrapids import kernels
from fbrapids.datasets.synthetic import views as workload
from fbrapids.datasets.synthetic.generate import generate
from fbrapids.features import extract
from fbrapids.kernels import dictionary_mode

ROWS = 40_000


@pytest.fixture(scope="module")
def joined(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    d = Path(tmp_path_factory.mktemp("canonical"))
    generate(ROWS, d, seed=3)
    return workload.join_views(*workload.clean_views(workload.read_views(d, eager=True)))


def _run(frame: pd.DataFrame, how: str) -> tuple[pd.DataFrame, dict[str, int]]:
    feats = workload.features()
    with dictionary_mode(how):
        kernels.reset_stats()
        out = extract(frame, feats)[list(feats)]
        return out, kernels.stats()


def _assert_same(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    for name in want:
        assert str(got[name].dtype) == str(want[name].dtype), f"{what}: {name} dtype"
        assert got[name].equals(want[name]), f"{what}: {name} differs from the row path"


def test_canonical_workload_dictionary_path_is_the_row_path_with_fewer_hashes(joined: pd.DataFrame) -> None:
    rows, st_rows = _run(joined, "off")
    assert st_rows["hashes_saved"] == 0 and st_rows["dictionary_runs"] == 0
    total = st_rows["hashes"]
    assert total > 30 * len(joined)  # ~52 fingerprints per impression on this workload

    auto, st_auto = _run(joined, "auto")
    _assert_same(auto, rows, "auto")
    # the title and interest token lists repeat: computed once per distinct text
    assert st_auto["dictionary_runs"] == 2
    assert st_auto["hashes"] + st_auto["hashes_saved"] == total
    assert st_auto["hashes_saved"] / total >= 0.15

    forced, st_on = _run(joined, "on")
    _assert_same(forced, rows, "on")
    assert st_on["hashes"] + st_on["hashes_saved"] == total
    assert st_on["hashes_saved"] / total >= 0.35  # plus the ids, cities, categories and their crosses


def test_categorical_inputs_use_their_codes(joined: pd.DataFrame) -> None:
    rows, _ = _run(joined, "off")
    coded = joined.astype({"gender": "category", "city": "category", "os": "category", "geo_city": "category"})
    out, st_cat = _run(coded, "auto")
    _assert_same(out, rows, "categorical")
    # gender, city, os and geo_city hashed once per category, besides titles and interests
    assert st_cat["dictionary_runs"] == 6
    _, st_plain = _run(joined, "auto")
    assert st_cat["hashes_saved"] - st_plain["hashes_saved"] > 3.9 * len(joined) - 4 * 1000


def test_explain_shows_each_operators_path(joined: pd.DataFrame) -> None:
    lines = str(joined.fbx.explain(**workload.features())).splitlines()

    def path(op: str) -> str:  # the line under the operator's own line
        i = next(i for i, line in enumerate(lines) if line.strip().startswith("#") and f" {op}" in line)
        return lines[i + 1].strip()

    assert path("split(title, sep=' ', buckets=262144)").startswith("dictionary path: once per distinct value (")
    assert path("hash_bucket(user_id,").startswith("row by row (plain input")
    assert path("split(query, sep=' ', buckets=262144)") == "row by row (too many distinct values)"
    assert path("hash_bucket(city,").startswith("row by row")
    coded = str(joined.astype({"city": "category"}).fbx.explain(**workload.features())).splitlines()
    i = next(i for i, line in enumerate(coded) if " hash_bucket(city," in line)
    assert coded[i + 1].strip() == f"dictionary path: once per distinct value ({joined['city'].nunique():,} distinct of {len(joined):,} rows)"
