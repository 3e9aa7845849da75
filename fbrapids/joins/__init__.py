"""Joins of views with dictionaries and with each other: :mod:`~fbrapids.joins.strategies`
chooses broadcast, partitioned or shuffle for dask frames and places the build side;
:mod:`~fbrapids.joins.hash_join` is the eager engine (one hash table, one gather).  The
public names (``join``, ``join_decisions``, ...) are re-exported here.

Example:
    >>> from fbrapids.joins import join
    >>> import pandas as pd
    >>> join(pd.DataFrame({"k": [1, 2]}), pd.DataFrame({"k": [2], "v": [9]}), on="k")["v"].tolist()
    [<NA>, 9]
"""

from fbrapids.joins.strategies import JoinDecision, check_keys, join, join_decision_mark, join_decisions

__all__ = ["join", "join_decisions", "join_decision_mark", "JoinDecision", "check_keys"]
