"""``target_encode``: the smoothed mean label per key tuple, computed at frame level (fitted stage)."""

from __future__ import annotations

from fbrapids.errors import OperatorError
from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def target_encode(*keys: ExprLike, label: ExprLike, smoothing: float = 20.0, folds: int = 5, seed: int = 0,
                  fold_by: ExprLike | None = None) -> Call:
    """Smoothed mean ``label`` per key (tuple): ``(sum + smoothing * prior) / (count + smoothing)``.

    Fitted on the training frame; other frames get the frozen statistics.  On the
    training frame itself (``extract(fitted, training=True)``) each row gets out-of-fold
    statistics over ``folds`` seeded folds -- keys' and prior's sums without the row's fold --
    so no row's label enters its own encoding.  ``fold_by`` (a row id column of integers or
    text, e.g. ``"instance_id"``) seeds the folds so they do not depend on partitioning
    (required on dask); without it the row position does.  A row's fold is
    ``splitmix64(h + 0x9E3779B97F4A7C15 * (seed + 1)) % folds`` (mod 2^64 arithmetic), ``h``
    its ``fold_by`` value's FarmHash Fingerprint64 (``hash(fold_by)``: the text, an integer's
    decimal text; 0 for a null) or, without ``fold_by``, its position ``0 .. n - 1``;
    ``splitmix64(z)``: ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
    z *= 0x94D049BB133111EB; z ^= z >> 31``.  Applied with frozen statistics the frame
    needs only the keys (no label: a serving frame has none).  Labels are summed as float64
    (out of fold, the other folds' sums are added up, never the row's fold subtracted from
    the total, so a large label never cancels small ones); rows with a null label count in
    neither sum nor count.

    Example:
        >>> str(target_encode("user_id", label="click", fold_by="instance_id"))
        'target_encode(user_id, click, instance_id, n_keys=1, smoothing=20.0, folds=5, seed=0, fold_by=True)'
    """
    if not keys:
        raise OperatorError("target_encode needs at least one key")
    extra = (fold_by,) if fold_by is not None else ()
    return call("target_encode", *keys, label, *extra, n_keys=len(keys), smoothing=float(smoothing),
                folds=int(folds), seed=int(seed), fold_by=fold_by is not None)


OPERATOR = frame_level("target_encode", "fitted", "Smoothed mean label per key tuple; out of fold on the fitted frame.",
                       builder=target_encode)
