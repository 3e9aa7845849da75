"""Fitted operators and behaviour-history operators: the frame-level algorithms.

Two kinds of operator here need the whole frame, not one row at a time:

* **fitted** operators (:mod:`fbrapids.fitting.encoders`): ``categorify``,
  ``count_encode``, ``target_encode``, ``quantile_bucketize``, ``normalize``, ``minmax``
  and ``fill_null`` with a fitted mean or median.  Their statistics are fitted on one frame
  (the training days) into a :class:`~fbrapids.fitting.state.FittedState` and frozen;
  every other frame gets those statistics, never a refit.
* **history** operators (:mod:`fbrapids.fitting.history`): a key's last N items, windowed
  counts and means, time since the previous event, each over rows *strictly before* the
  row's time, computed on the frame itself (on dask after a shuffle by key).

The algorithms take frames whose columns are the operators' already-computed inputs; the
frame-facing layer (:mod:`fbrapids.features.fitted`) computes those inputs with the
meta-kernels and wires the results back.  Each operator (the row operators of
:mod:`fbrapids.fitting.rowops` too) declares, beside its algorithm, a
:class:`~fbrapids.fitting.frame_op.FrameOperator` saying what that layer asks about it
(:func:`fbrapids.fitting.registry.frame_operator` finds one by name).

Example:
    >>> import pandas as pd
    >>> from fbrapids.fitting.encoders import spec_of
    >>> spec = spec_of("count_encode", {"n_keys": 1})
    >>> stats = spec.stats(pd.DataFrame({"a0": [1, 1, 2]}))
    >>> state = spec.finish({k: [v] for k, v in stats.items()}, rows=3)
    >>> spec.apply(pd.DataFrame({"a0": [1, 2, 3]}), state).tolist()
    [2, 1, 0]
"""
