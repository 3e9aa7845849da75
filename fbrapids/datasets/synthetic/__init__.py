"""The generated data: :mod:`~fbrapids.datasets.synthetic.generate` writes it (``fbrapids gen``),
:mod:`~fbrapids.datasets.synthetic.views` reads, cleans and joins its views as ``.fbx`` chains,
and :mod:`~fbrapids.datasets.synthetic.declared` declares it as a
:class:`~fbrapids.workloads.Workload` (its names are re-exported here).

Example:
    >>> from fbrapids.datasets import synthetic
    >>> synthetic.LABEL, synthetic.GROUP
    ('click', 'user_id')
"""

from fbrapids.datasets.synthetic.declared import (
    DENSE,
    DERIVED,
    DIN_SEQUENCE,
    DIN_TARGET,
    GROUP,
    LABEL,
    SPARSE,
    TIME,
    as_workload,
    din_history,
    features,
    workload,
)

__all__ = ["LABEL", "GROUP", "TIME", "DENSE", "SPARSE", "DERIVED", "DIN_SEQUENCE", "DIN_TARGET", "din_history",
           "features", "workload", "as_workload"]
