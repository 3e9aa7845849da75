"""The committed notebooks' stored outputs are today's: executed on the generator's current
data version (fbrapids.datasets.synthetic.generate.DATA_VERSION, recorded by scripts/run_notebooks.py), with no
absolute path of the machine that ran them and no warning.  And the version is bumped
whenever the generator's output changes (a fingerprint of a small generated set)."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from fbrapids.datasets.synthetic.generate import DATA_VERSION, generate

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))

#: DATA_VERSION -> the fingerprint of generate(2000, seed=0); a new version adds its line
FINGERPRINTS = {2: "5276ab15355b4e5acef8ba2ea9844c0735fa2effa4c6684d4dc16165b66b86cf"}

# an absolute path of a machine: a root folder that outputs show (temporary, home, checkout, venv)
ABSOLUTE = re.compile(r"(?<![\w.$~/:-])/(?:tmp|var|private|home|root|Users|work|opt|usr|mnt|srv)/")


def _outputs(path: Path) -> list[tuple[int, dict]]:
    book = json.loads(path.read_text())
    return [(i, o) for i, c in enumerate(book["cells"]) if c["cell_type"] == "code" for o in c.get("outputs", [])]


def _text(output: dict) -> str:
    """An output's text, images left out (base64 may hold any characters)."""
    parts = [output.get("text", "")]
    for mime, value in output.get("data", {}).items():
        if mime.startswith("text/"):
            parts.append(value)
    text = "".join("".join(p) if isinstance(p, list) else p for p in parts)
    return re.sub(r"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+", "", text)


def test_the_generator_version_is_bumped_when_its_data_changes(tmp_path):
    generate(2000, tmp_path, seed=0)
    digest = hashlib.sha256()
    for name in ("impressions", "users", "ads", "basic"):
        frame = pq.read_table(tmp_path / f"{name}.parquet").to_pandas()
        for col in frame.columns:
            values = frame[col].round(6) if pd.api.types.is_float_dtype(frame[col]) else frame[col]
            digest.update(col.encode())
            digest.update(pd.util.hash_pandas_object(values, index=False).to_numpy().tobytes())
    assert FINGERPRINTS.get(DATA_VERSION) == digest.hexdigest(), (
        "generate() writes other data than DATA_VERSION's: bump fbrapids.datasets.synthetic.generate.DATA_VERSION, add its "
        f"fingerprint {digest.hexdigest()} here, and re-run `make notebooks` and "
        "`python scripts/docs_figures.py --run demo trial`")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_are_of_the_current_data_version(path):
    meta = json.loads(path.read_text())["metadata"].get("fbrapids", {})
    assert meta.get("data_version") == DATA_VERSION, (
        f"{path.name}'s outputs were made on data version {meta.get('data_version')}, the generator is at "
        f"{DATA_VERSION}: re-run `make notebooks`")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_hold_no_machine_path_and_no_warning(path):
    outputs = _outputs(path)
    assert outputs, f"{path.name} has no stored outputs"
    for i, output in outputs:
        text = _text(output)
        assert not ABSOLUTE.search(text), f"{path.name} cell {i}: {ABSOLUTE.search(text).group(0)}... in {text[:300]}"
        assert output.get("name") != "stderr" or "Warning" not in text, f"{path.name} cell {i}: {text[:300]}"
        assert output.get("output_type") != "error", f"{path.name} cell {i}"


def test_the_absolute_path_pattern_catches_what_it_should():
    assert ABSOLUTE.search("in /tmp/fbrapids-notebook-data-20000") and ABSOLUTE.search("'/home/me/x'")
    assert not ABSOLUTE.search("in $TMPDIR/fbrapids-notebook-data-20000") and not ABSOLUTE.search("rows/s/tmp")
