"""Pools of the service's scarce units (work slots, call and queue places, body bytes),
shared fairly by clients: no client, and no set of clients, can take them all.

A :class:`FairShare` holds ``total`` units and knows what each client holds.  A client may
take ``amount`` more while all of these hold:

* the pool has ``amount`` free;
* the client would hold at most ``per_client``;
* the client holds less than ``floor`` (every client may hold that much while there is
  room), or it would hold no more than the pool then has left free.

The last rule is the fairness: a client that holds much must leave at least as much free
for the others, so each greedy client can take at most half of what the ones before it left.
One client alone takes half of the pool (or ``per_client``); three take 1/2, 1/4 and 1/8 of
it, and an eighth is still free when a fourth client comes.  A client that holds nothing
gets a unit whenever one is free, however many units and connections the others hold.

Units that free up go to waiting clients in order of what they hold (the one holding least
first; ties in the order they began to wait), each client's waiters first come, first
served: :meth:`FairShare.wait` on the event loop.  Nothing here is thread-safe: the gate
uses its pools on the event loop only.

Example:
    >>> slots = FairShare("work_slots", total=8, per_client=8)
    >>> [slots.take("a") for _ in range(5)]
    [True, True, True, True, False]
    >>> slots.take("b"), slots.take("b"), slots.take("b")
    (True, True, False)
    >>> slots.take("c"), slots.free, slots.held("a")
    (True, 1, 4)
    >>> slots.give("a"); slots.free
    2
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from typing import Hashable


class FairShare:
    """``total`` units shared fairly by clients (module docstring).

    Args:
        name: what the units are (in messages and ``/health``).
        total: the units of the pool.
        per_client: the most one client may hold.
        floor: what any client may hold while the pool has room, whatever the others hold.
    """

    def __init__(self, name: str, total: int, per_client: int, floor: int = 1) -> None:
        self.name, self.total, self.per_client, self.floor = name, int(total), int(per_client), int(floor)
        self.used = 0
        self._held: dict[Hashable, int] = {}
        self._waiting: dict[Hashable, collections.deque[asyncio.Future]] = {}
        self._since: dict[Hashable, int] = {}  # client -> when its first waiter began to wait (a counter)
        self._tick = itertools.count()
        self.refused = 0  # takes refused at once (the caller answered 429 / 503, or waited)

    @property
    def free(self) -> int:
        return self.total - self.used

    def held(self, client: Hashable) -> int:
        """The units ``client`` holds now."""
        return self._held.get(client, 0)

    def allows(self, client: Hashable, amount: int = 1) -> bool:
        """Whether ``client`` may take ``amount`` more now (the rules of the module docstring)."""
        held = self._held.get(client, 0)
        after = held + amount
        if amount > self.free or after > self.per_client:
            return False
        return held < self.floor or after <= self.free - amount

    def take(self, client: Hashable, amount: int = 1) -> bool:
        """Take ``amount`` for ``client`` if :meth:`allows` says so (and none of its own calls
        waits before it); whether it did."""
        if self._waiting.get(client) or not self.allows(client, amount):
            self.refused += 1
            return False
        self._add(client, amount)
        return True

    def _add(self, client: Hashable, amount: int) -> None:
        self._held[client] = self._held.get(client, 0) + amount
        self.used += amount

    def give(self, client: Hashable, amount: int = 1) -> None:
        """``client`` gives back ``amount``; units that free up go to the waiting clients."""
        left = self._held.get(client, 0) - amount
        if left > 0:
            self._held[client] = left
        else:
            self._held.pop(client, None)
        self.used -= amount
        if self._waiting:
            self._grant()

    def _grant(self) -> None:
        """Hand free units to waiters: the waiting client holding least first (ties: the one
        waiting longest), one unit at a time, while the rules allow."""
        granted = True
        while granted and self.free > 0:
            granted = False
            for client in sorted(self._waiting, key=lambda c: (self._held.get(c, 0), self._since[c])):
                if not self.allows(client):
                    continue
                queue = self._waiting[client]
                while queue and queue[0].done():  # timed out or cancelled meanwhile
                    queue.popleft()
                if not queue:
                    self._forget_waiter(client)
                    continue
                self._add(client, 1)
                queue.popleft().set_result(True)
                if not queue:
                    self._forget_waiter(client)
                granted = True
                break

    def _forget_waiter(self, client: Hashable) -> None:
        self._waiting.pop(client, None)
        self._since.pop(client, None)

    async def wait(self, client: Hashable, timeout: float, gone: asyncio.Event | None = None) -> bool:
        """One unit for ``client``: at once when :meth:`take` allows, else the next one the
        rules give it, within ``timeout`` seconds; False when none came in time or ``gone``
        was set first (its client hung up).  A True answer must be given back."""
        if self.take(client):
            return True
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if client not in self._waiting:
            self._waiting[client] = collections.deque()
            self._since[client] = next(self._tick)
        self._waiting[client].append(fut)
        watch = asyncio.ensure_future(gone.wait()) if gone is not None else None
        try:
            await asyncio.wait([fut, watch] if watch is not None else [fut], timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            if watch is not None:
                watch.cancel()
        if fut.done() and not fut.cancelled():
            return True
        fut.cancel()
        queue = self._waiting.get(client)
        if queue is not None:
            try:
                queue.remove(fut)
            except ValueError:
                pass
            if not queue:
                self._forget_waiter(client)
        return False

    def waiting(self, client: Hashable | None = None) -> int:
        """Waiters now (of ``client``, or of all)."""
        if client is not None:
            return sum(not f.done() for f in self._waiting.get(client, ()))
        return sum(not f.done() for q in self._waiting.values() for f in q)

    def as_dict(self) -> dict[str, int]:
        """``/health``'s view: total, used, clients holding some, waiters, refusals."""
        return {"total": self.total, "used": self.used, "clients": len(self._held), "waiting": self.waiting(),
                "refused": self.refused}
