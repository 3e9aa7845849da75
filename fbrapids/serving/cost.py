"""What a scoring call costs, estimated from its records before anything is extracted.

Items alone do not measure a call: a request's lists (a query's text, DIN's ``hist_cat``)
are read for every candidate item (broadcast to it, crossed with its own lists by pair
features), so a 250 KiB body of 512 items can cost as much as millions of plain items.
:class:`CallCost` bounds every list and counts the work:

* every text value holds at most ``max_text_chars`` characters and every list value at most
  ``max_list_len`` entries (a :class:`~fbrapids.errors.RequestTooLargeError` naming the
  record and column, before any work);
* an item's *work* is ``features + r + i + r_pair * i_pair``: ``r`` / ``i`` the characters
  and list entries of its request's and its own columns, ``r_pair`` / ``i_pair`` those of the
  columns pair features read (a cross of a request list with an item list is their product);
* a call whose items' work adds up to more than ``max_work`` is refused (413), and the
  scorer cuts a call into slices of at most ``chunk_work`` work (as well as ``chunk_items``
  items), so one slice's memory is bounded whatever the request's lists.

Peak memory: with these bounds a call's lists are read for at most ``chunk_work`` work at a
time, so the scorer's peak memory over its resting size grows by at most
:data:`PEAK_BASE_BYTES` plus :data:`PEAK_BODY_FACTOR` times the call's body bytes, for every
model (DIN's history included; tests/serving/test_serving_cost_memory.py measures it).

Example:
    >>> from fbrapids.serving.example import example_spec
    >>> cost = CallCost(example_spec(), n_features=8)
    >>> req = {"user_id": 1, "age": 30.0, "gender": "f", "query": "red shoes", "history": "a b"}
    >>> r = cost.request_size(req, "request 0")
    >>> cost.item_work(r, [{"ad_id": 5, "category": 1, "price": 2.0, "title": "shoe"}], lambda j: f"item {j}").tolist()
    [25]
    >>> cost.request_size({**req, "query": "x" * 10_000}, "request 0")
    Traceback (most recent call last):
    ...
    fbrapids.errors.RequestTooLargeError: request 0: column 'query' holds 10000 characters, more than max_text_chars=8192
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

import numpy as np

from fbrapids.errors import ArgumentError, RequestTooLargeError
from fbrapids.kernels import columns_of

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.serving.spec import ServingSpec

#: the longest list value (entries) a request or item column may hold
MAX_LIST_LEN = 1024
#: the longest text value (characters) a request or item column may hold
MAX_TEXT_CHARS = 8192
#: the most work (module docstring) one call may ask for: about a call of
#: ``MAX_ITEMS`` items like the README's demo request (about 330 units each)
MAX_WORK = 4_000_000
#: the most work one slice of a call holds (its memory is bounded by it)
CHUNK_WORK = 250_000
#: the documented peak memory of one call over the scorer's resting size: this, plus
#: :data:`PEAK_BODY_FACTOR` times the call's body bytes
PEAK_BASE_BYTES = 64 << 20
PEAK_BODY_FACTOR = 16


class CallCost:
    """The bounds and work estimate of calls against ``spec`` (module docstring); ``n_features``:
    the model inputs each item row has."""

    def __init__(self, spec: ServingSpec, n_features: int, max_list_len: int = MAX_LIST_LEN,
                 max_text_chars: int = MAX_TEXT_CHARS, max_work: int = MAX_WORK, chunk_work: int = CHUNK_WORK) -> None:
        for name, v in (("max_list_len", max_list_len), ("max_text_chars", max_text_chars),
                        ("max_work", max_work), ("chunk_work", chunk_work)):
            if type(v) is not int or v < 1:
                raise ArgumentError(f"{name} must be an integer >= 1, got {v!r}")
        self.max_list_len, self.max_text_chars = max_list_len, max_text_chars
        self.max_work, self.chunk_work = max_work, chunk_work
        self.n_features = int(n_features)
        sized = [c for c, t in spec.schema.items() if t == "str" or t.startswith("list<")]
        paired = set().union(*[columns_of(e) for e in spec.pair_features.values()]) if spec.pair_features else set()
        self._request = [c for c in spec.request_columns if c in sized]
        self._item = [c for c in spec.item_columns if c in sized]
        self._request_pair = [c for c in self._request if c in paired]
        self._item_pair = [c for c in self._item if c in paired]

    def as_dict(self) -> dict[str, int]:
        return {"max_list_len": self.max_list_len, "max_text_chars": self.max_text_chars,
                "max_work": self.max_work, "chunk_work": self.chunk_work}

    def _size(self, record: object, columns: Sequence[str], label: Callable[[], str]) -> int:
        """Characters and list entries of ``record``'s ``columns``; refused over a bound."""
        total = 0
        if not isinstance(record, Mapping):
            return 0  # not an object: validation names it
        for c in columns:
            v = record.get(c)
            if isinstance(v, str):
                if len(v) > self.max_text_chars:
                    raise RequestTooLargeError(f"{label()}: column {c!r} holds {len(v)} characters, more than "
                                               f"max_text_chars={self.max_text_chars}")
                total += len(v)
            elif isinstance(v, (list, tuple)):
                if len(v) > self.max_list_len:
                    raise RequestTooLargeError(f"{label()}: column {c!r} holds {len(v)} entries, more than "
                                               f"max_list_len={self.max_list_len}")
                total += len(v)
        return total

    def request_size(self, request: Mapping[str, object], label: str) -> tuple[int, int]:
        """``(r, r_pair)`` of a request record; refused over a list bound."""
        return (self._size(request, self._request, lambda: label),
                self._size(request, self._request_pair, lambda: label))

    def item_work(self, request_size: tuple[int, int], items: Iterable[Mapping[str, object]],
                  label: Callable[[int], str]) -> np.ndarray:
        """Each item's work (int64) for a request of ``request_size``; refused over a list bound."""
        r, r_pair = request_size
        base = self.n_features + r
        out = [base + self._size(it, self._item, functools.partial(label, j))
               + (r_pair * self._size(it, self._item_pair, functools.partial(label, j)) if r_pair else 0)
               for j, it in enumerate(items)]
        return np.asarray(out, dtype=np.int64)
