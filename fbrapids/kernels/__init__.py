"""Feature operators as layered meta-kernels: expression DAG, layering, placement, the
CUDA / host C renderers, the pooled allocator, the kernel cache and the runtimes.

``stats()`` gives this process's kernel counters (launches, partitions, rows, pool
regrowths, peak pool bytes); ``reset_stats()`` zeroes them.  A compiled plan carries its
own counters too (``fbrapids.kernels.extract.compiled_plan(df, features).stats``).

Example:
    >>> import fbrapids.kernels as k
    >>> k.reset_stats(); k.stats()["launches"]
    0
"""

from fbrapids.kernels.stats import reset_stats, stats

__all__ = ["stats", "reset_stats"]
