"""A toy data set in one file, as a user would add one: its features, its workload for a
folder of its files, and the one registration call.  Importing this module registers it as
``"toy"`` (``tests/project/test_toy_dataset.py`` uses it through a workload file and through
its own workload).

Its file, ``toy.csv``: ``click`` (the label), ``user`` (an id), ``price`` (a float, empty when
missing, some negative) and ``title`` (ASCII text).
"""

from __future__ import annotations

import os
from typing import Any

from fbrapids import ops
from fbrapids.workloads import Dataset, Split, View, Workload, register_dataset

FILE = "toy.csv"
LABEL = "click"


def features() -> dict[str, Any]:
    """``price_log``: log(1 + price), missing and negative prices as 0; ``title_len``: the
    title's length; ``title_lc``: the title in lower case."""
    return {"price_log": ops.log1p(ops.clip(ops.fill_null(ops.cast("price", "f64"), 0.0), 0.0, 1e300)),
            "title_len": ops.length("title"),
            "title_lc": ops.lower("title")}


def workload(root: str | os.PathLike[str]) -> Workload:
    """The toy file under ``root`` as a workload: the last quarter of its rows held out."""
    return Workload(name="toy", root=os.fspath(root), label=LABEL, views=[View("log", FILE)],
                    split=Split("fraction", fraction=0.25), features=features(),
                    sparse=["user"], dense=["price_log", "title_len"])


DATASET = register_dataset(Dataset("toy", features, workload))
