"""What a set of features is in a signature: output name -> feature.

A feature is an expression (:class:`~fbrapids.kernels.Expr`, from :mod:`fbrapids.ops`) or a
column name, which reads that column (:func:`~fbrapids.kernels.as_expr`); anything else is
an ``OperatorTypeError`` naming it where it is read.

Example:
    >>> from fbrapids.kernels import as_expr
    >>> features: FeatureMap = {"t": "ts"}
    >>> {name: as_expr(e) for name, e in features.items()}
    {'t': Col(name='ts')}
"""

from __future__ import annotations

from typing import Mapping, TypeAlias, Union

from fbrapids.kernels import Expr

#: one feature: an expression, or a column name (that column)
ExprLike: TypeAlias = Union[Expr, str]
#: output name -> feature
FeatureMap: TypeAlias = Mapping[str, ExprLike]
