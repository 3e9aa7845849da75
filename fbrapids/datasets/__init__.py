"""The built-in data sets, each one module that builds its
:class:`~fbrapids.workloads.Dataset` and registers it at import
(:func:`~fbrapids.workloads.register_dataset`): the generated data
(:mod:`fbrapids.datasets.synthetic`, what the demo runs on) and the Criteo log with the DLRM
paper's preprocessing (:mod:`fbrapids.datasets.criteo`).  Importing this package registers
them all; the package root asks for that the first time a workload looks a data set up.

Example:
    >>> from fbrapids.workloads import registered_datasets
    >>> {"criteo", "synthetic"} <= set(registered_datasets())
    True
"""

from fbrapids.datasets import criteo, synthetic

__all__ = ["criteo", "synthetic"]
