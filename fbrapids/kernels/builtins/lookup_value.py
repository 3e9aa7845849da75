"""``lookup_value``: dictionary value -> float64 (what ``lookup`` with float values builds),
computed at frame level (row stage).

Example:
    >>> OPERATOR.stage, OPERATOR.needs_fit
    ('row', False)
"""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import frame_level

OPERATOR = frame_level("lookup_value", "row", "Dictionary value -> float64.")
