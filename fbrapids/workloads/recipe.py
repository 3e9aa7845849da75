"""A training recipe: the learning rates, regularisation and epochs a model trains with.

What a recipe sets, and where:

* ``dense_lr``: the dense optimizer's (``fit``'s Adam) learning rate;
* ``sparse_lr``: the embedding tables' row-wise Adagrad learning rate (:class:`StoreConfig.lr`);
* ``first_order_lr``: that of the tables added straight into the logit (Wide&Deep's wide
  side, DeepFM's and DIN's first-order weights, the logistic regression's weights:
  :func:`~fbrapids.trainers.models.wide_deep.first_order_config`); None: ``sparse_lr``;
* ``weight_decay``: L2 on the looked-up rows of every table (:class:`StoreConfig.weight_decay`);
* ``dropout``: after each hidden ReLU of the models' MLPs while training;
* ``epochs``: passes over the training rows;
* ``sparse_lr_decay``: each pass's factor on every table's learning rate (pass ``e`` from 0
  at ``lr * sparse_lr_decay ** e``: ``fit``'s :attr:`~fbrapids.trainers.fit_config.FitConfig.sparse_lr_decay`;
  1: a constant rate);
* ``calibrate``: whether ``fit`` holds rows back for its post-hoc shift
  (:mod:`fbrapids.trainers.calibration`: every 8th batch, up to 32,768 rows) or trains on
  every row and leaves the logits as they are (``RunConfig(calibrate=False)`` turns it off
  for any recipe).  Not a tuning's field: the tuning's models are scored after a shift of
  their own (:mod:`fbrapids.app.tuning`), blind to it.

None of it changes a model's layout, so a checkpoint or an export does not depend on it.
``fbrapids.app.pipeline.RECIPES`` holds the demo's, chosen on a validation day
(:mod:`fbrapids.app.tuning`); ``RunConfig(recipe=...)`` sets one, ``RunConfig(tune=True)``
chooses one on the run's own data.

Example:
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> r = Recipe(sparse_lr=0.1, weight_decay=1e-5)
    >>> r.store(StoreConfig(cache_rows=8)).lr, r.first_order_store(StoreConfig()).dim
    (0.1, 1)
    >>> r.with_(dropout=0.2).describe()
    'dense lr 0.001, sparse lr 0.1, first-order lr as the sparse one, weight decay 1e-05, dropout 0.2, 1 epoch'
    >>> r.with_(epochs=4, sparse_lr_decay=0.5).describe().split(", ")[-2:]
    ['4 epochs', 'sparse lrs x0.5 each pass']
    >>> Recipe(epochs=0)
    Traceback (most recent call last):
    ...
    fbrapids.errors.ArgumentError: Recipe.epochs must be an int >= 1, got 0
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TypeAlias

from fbrapids.errors import ArgumentError

if TYPE_CHECKING:  # (annotations only: importing the trainers loads torch)
    from fbrapids.trainers.sparse import StoreConfig

#: the value of a :class:`Recipe` field (a rate, a count, a switch; None: a rate left to another)
RecipeValue: TypeAlias = int | float | bool | None

#: the fields a tuning grid may vary (every field of a recipe but ``calibrate``)
FIELDS = ("dense_lr", "sparse_lr", "first_order_lr", "weight_decay", "dropout", "epochs", "sparse_lr_decay")


@dataclass(frozen=True)
class Recipe:
    """How a model is trained (the module docstring); the defaults are fbrapids' recipe before
    any tuning (``fit``'s Adam rate, :class:`StoreConfig`'s Adagrad rate, no regularisation)."""

    dense_lr: float = 1e-3
    sparse_lr: float = 0.05
    first_order_lr: float | None = None
    weight_decay: float = 0.0
    dropout: float = 0.0
    epochs: int = 1
    sparse_lr_decay: float = 1.0
    calibrate: bool = True

    def __post_init__(self) -> None:
        for name in ("dense_lr", "sparse_lr", "first_order_lr"):
            v = getattr(self, name)
            if not (v is None and name == "first_order_lr") and not _number(v, low=0.0, open_low=True):
                raise ArgumentError(f"Recipe.{name} must be a number > 0, got {v!r}")
        if not _number(self.weight_decay, low=0.0):
            raise ArgumentError(f"Recipe.weight_decay must be a number >= 0, got {self.weight_decay!r}")
        if not _number(self.dropout, low=0.0) or self.dropout >= 1:
            raise ArgumentError(f"Recipe.dropout must be in [0, 1), got {self.dropout!r}")
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise ArgumentError(f"Recipe.epochs must be an int >= 1, got {self.epochs!r}")
        if not _number(self.sparse_lr_decay, low=0.0, open_low=True) or self.sparse_lr_decay > 1:
            raise ArgumentError(f"Recipe.sparse_lr_decay must be in (0, 1], got {self.sparse_lr_decay!r}")
        if not isinstance(self.calibrate, bool):
            raise ArgumentError(f"Recipe.calibrate must be a bool, got {self.calibrate!r}")

    @property
    def first_order(self) -> float:
        """The first-order tables' learning rate (``sparse_lr`` when not set)."""
        return self.sparse_lr if self.first_order_lr is None else self.first_order_lr

    def with_(self, **changes: Any) -> "Recipe":  # (each a field's value: the fields' types, checked again)
        """A copy with ``changes``; an unknown name is an :class:`~fbrapids.errors.ArgumentError`."""
        known = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(changes) - set(known))
        if unknown:
            raise ArgumentError(f"Recipe has no field(s) {unknown}; known: {', '.join(known)}")
        return dataclasses.replace(self, **changes)

    def store(self, base: StoreConfig) -> StoreConfig:
        """``base`` (tiers, seed) with this recipe's embedding learning rate and weight decay."""
        return base.with_(lr=self.sparse_lr, weight_decay=self.weight_decay)

    def first_order_store(self, base: StoreConfig) -> StoreConfig:
        """The first-order tables' configuration: ``first_order_config`` of :meth:`store`,
        at the first-order learning rate."""
        from fbrapids.trainers.models.wide_deep import first_order_config

        return first_order_config(self.store(base)).with_(lr=self.first_order)

    def as_dict(self) -> dict[str, RecipeValue]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One line naming every setting (the per-pass decay where the rates decay, the
        calibration where there is none)."""
        first = "as the sparse one" if self.first_order_lr is None else f"{self.first_order_lr:g}"
        decay = "" if self.sparse_lr_decay == 1 else f", sparse lrs x{self.sparse_lr_decay:g} each pass"
        held = "" if self.calibrate else ", every row trained on (no post-hoc calibration)"
        return (f"dense lr {self.dense_lr:g}, sparse lr {self.sparse_lr:g}, first-order lr {first}, "
                f"weight decay {self.weight_decay:g}, dropout {self.dropout:g}, "
                f"{self.epochs} epoch{'s' if self.epochs > 1 else ''}{decay}{held}")


#: the grid a tuning tries by default (``RunConfig(tune=True)``; :mod:`fbrapids.app.tuning`), one
#: field at a time in this order, each value with the others at the best found so far
DEFAULT_GRID: dict[str, tuple[RecipeValue, ...]] = {
    "sparse_lr": (0.02, 0.05, 0.1),
    "first_order_lr": (0.02, 0.05, 0.2),
    "weight_decay": (0.0, 1e-5, 1e-4),
    "dropout": (0.0, 0.1, 0.3),
    "dense_lr": (3e-4, 1e-3, 3e-3),
    "epochs": (1, 2),
}


def check_grid(grid: Mapping[str, Sequence[RecipeValue]]) -> dict[str, tuple[RecipeValue, ...]]:
    """``grid`` checked: recipe field -> a non-empty list of values, each a valid setting of
    that field; returned as tuples, in order.

    Example:
        >>> check_grid({"dropout": [0.0, 0.2]})
        {'dropout': (0.0, 0.2)}
        >>> check_grid({"lr": [0.1]})
        Traceback (most recent call last):
        ...
        fbrapids.errors.ArgumentError: a tuning grid varies recipe fields (dense_lr, sparse_lr, first_order_lr, weight_decay, dropout, epochs, sparse_lr_decay), not ['lr']
    """
    if not isinstance(grid, Mapping) or not grid:
        raise ArgumentError(f"a tuning grid is a non-empty dict of recipe field -> values, got {grid!r}")
    unknown = sorted(set(grid) - set(FIELDS))
    if unknown:
        raise ArgumentError(f"a tuning grid varies recipe fields ({', '.join(FIELDS)}), not {unknown}")
    out = {}
    for name, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ArgumentError(f"a tuning grid's {name} needs a non-empty list of values, got {values!r}")
        for v in values:
            Recipe().with_(**{name: v})  # each value a valid setting
        out[name] = tuple(values)
    return out


def _number(v: object, low: float, open_low: bool = False) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return False
    return v > low if open_low else v >= low
