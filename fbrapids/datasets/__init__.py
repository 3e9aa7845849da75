"""Datasets as declared workloads: the generated data (:mod:`fbrapids.datasets.synthetic`, what
the demo runs on) and readers for public CTR logs with the preprocessing their papers use
(:mod:`fbrapids.datasets.criteo`)."""
