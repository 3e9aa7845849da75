"""tqdm's automatic choice of progress bar, without its warning where it has no widget.

``tqdm.auto`` picks the notebook widget inside Jupyter and the text bar elsewhere; inside
a Jupyter kernel without ``ipywidgets`` it falls back to the text bar *and* emits a
``TqdmWarning`` ("IProgress not found"), which then sits in every executed notebook's
output.  This module makes the same choice without the warning: the widget bar when
``ipywidgets`` is importable, the text bar (``tqdm.std``) otherwise.  Every fbrapids bar
comes from here.

Example:
    >>> import io
    >>> with tqdm(total=3, file=io.StringIO()) as bar:
    ...     _ = bar.update(3)
    >>> bar.n
    3
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("ipywidgets") is None:
    from tqdm.std import tqdm
else:  # pragma: no cover - ipywidgets is not a dependency
    from tqdm.auto import tqdm

__all__ = ["tqdm"]
