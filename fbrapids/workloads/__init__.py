"""Declared workloads: :class:`Workload` (a CTR log's views, joins, cleaning, label, split and
features), :class:`RunConfig` (how to train on it), and :func:`load_workload` (from TOML);
:class:`Dataset` and :func:`register_dataset` (a data set's features, named by a workload).

Example:
    >>> from fbrapids.workloads import RunConfig, Split, View, Workload
    >>> Workload([View("log", "log.csv")], label="click", split=Split("fraction", fraction=0.2)).log.paths
    ('log.csv',)
"""

from fbrapids.workloads.dataset_registry import Dataset, dataset, register_dataset, registered_datasets
from fbrapids.workloads.expressions import parse_candidate, parse_expression
from fbrapids.workloads.run_config import RunConfig
from fbrapids.workloads.spec import Join, SequenceFeature, Split, View, Workload
from fbrapids.workloads.toml_file import load_workload, workload_from_dict

__all__ = ["Workload", "View", "Join", "Split", "SequenceFeature", "RunConfig", "load_workload",
           "workload_from_dict", "parse_expression", "parse_candidate", "Dataset", "register_dataset", "dataset",
           "registered_datasets"]
