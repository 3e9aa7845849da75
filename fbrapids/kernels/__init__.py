"""Feature operators as layered meta-kernels: expression DAG, layering, placement, the
CUDA / host C renderers, the pooled allocator, the kernel cache and the runtimes.

Kernel counters of this process (launches, partitions, rows, pool regrowths, peak pool
bytes): ``fbrapids.kernels.stats.stats()``; ``fbrapids.kernels.stats.reset_stats()``
zeroes them.  A compiled plan carries its own counters too
(``fbrapids.kernels.extract.compiled_plan(df, features).stats``).

Example:
    >>> from fbrapids.kernels import stats
    >>> stats.reset_stats(); stats.stats()["launches"]
    0
"""
