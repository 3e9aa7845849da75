"""Every notebook in notebooks/ runs top to bottom without an error, on small data."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_there_are_the_four_walkthroughs():
    names = [p.stem for p in NOTEBOOKS]
    assert names == ["01_method_chaining", "02_custom_c_operator", "03_feature_trial", "04_dask_cluster"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    """... and leaves nothing in the temporary folder but dask's and torch's own folders (its
    data folder is removed by its last cell), and prints no warning."""
    monkeypatch.setenv("FBRAPIDS_NOTEBOOK_ROWS", "4000")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the kernel's tempfile.gettempdir()
    book = nbformat.read(path, as_version=4)
    NotebookClient(book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in book.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert outputs, "the notebook printed nothing"
    assert not [o for o in outputs if o.get("name") == "stderr" and "Warning" in o.get("text", "")]
    # torch.optim makes an empty $TMPDIR/torchinductor_<user> on first use: torch's own, like dask's scratch space
    kept = ("dask-scratch-space",)
    left = sorted(p.name for p in tmp.iterdir() if p.name not in kept
                  and not (p.name.startswith("torchinductor_") and not any(p.iterdir())))
    assert left == [], f"{path.name} left {left} in the temporary folder"
