"""A first-come, first-served lock, taken in turns by client: the scorer's model work is
handed out in arrival order within a client, and round robin between clients.

``threading.Lock`` makes no promise of order: a thread that releases it and asks again at
once (a client whose large call is scored slice after slice) usually gets it back before
a thread that has been waiting, so one client could hold the model for a whole large call.
:class:`FairLock` hands the lock over on release: to the longest waiter of the client whose
turn it is, each client's waiters taking one turn per round, and never to the releasing
client while another client waits (its turn was the one just ended).  So a call waits for at most
one slice of each other client with calls waiting, however many calls (connections) one
client has in flight; without clients (``client=None`` for all) it is plain first come,
first served.  A waiter whose client has gone (its ``gone`` event set) leaves the queue
within :data:`GONE_POLL_S`.

:meth:`FairLock.others_active` tells a holder whether another client took or asked for the
lock within the last ``window`` seconds: the scorer then cuts its slices smaller, so a
client that shares the model waits for a small slice, and a client alone keeps large ones.

Example:
    >>> lock = FairLock()
    >>> with lock:
    ...     lock.waiting()
    0
    >>> lock.acquire(); lock.release()
    >>> with lock.turn_of("10.0.0.7"):
    ...     lock.waiting()
    0
    >>> lock.others_active("10.0.0.7"), lock.others_active("10.0.0.8")
    (True, True)
    >>> FairLock().others_active("10.0.0.7")
    False
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from typing import Hashable, Iterator

from fbrapids.errors import CallCancelledError

#: how often a call waiting for its turn looks whether its client has gone (seconds)
GONE_POLL_S = 0.05


class FairLock:
    """A non-reentrant lock granted in turns by client, in order within one (module docstring)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._queues: dict[Hashable, collections.deque[threading.Event]] = {}
        self._order: collections.deque[Hashable] = collections.deque()  # clients with waiters, in turn order
        self._held = False
        self._holder: Hashable = None  # the client whose turn it is
        self._seen: dict[Hashable, float] = {}  # client -> when it last took or asked for the lock

    def acquire(self, client: Hashable = None, gone: threading.Event | None = None) -> None:
        """Wait for the lock: at once if it is free and nobody waits, else for ``client``'s
        turn (after every earlier waiter of the same client).  When ``gone`` is set while it
        waits (its call's client hung up), it leaves the queue and raises
        :class:`~fbrapids.errors.CallCancelledError`."""
        with self._guard:
            now = time.monotonic()
            if len(self._seen) >= 256:  # bounded: only the recent clients matter
                self._seen = {c: t for c, t in self._seen.items() if now - t < 60.0}
            self._seen[client] = now
            if not self._held and not self._order:
                self._held = True
                self._holder = client
                return
            turn = threading.Event()
            queue = self._queues.setdefault(client, collections.deque())
            if not queue:
                self._order.append(client)
            queue.append(turn)
        if gone is None:
            turn.wait()  # set by release(): the lock is ours, handed over without becoming free
            return
        while not turn.wait(GONE_POLL_S):
            if gone.is_set() and self._leave(client, turn):
                raise CallCancelledError("the client hung up while its call waited for the scorer")

    def _leave(self, client: Hashable, turn: threading.Event) -> bool:
        """Take ``turn`` out of ``client``'s queue; False when it was handed the lock meanwhile."""
        with self._guard:
            if turn.is_set():
                return False
            queue = self._queues[client]
            queue.remove(turn)
            if not queue:
                del self._queues[client]
                self._order.remove(client)
            return True

    def release(self) -> None:
        """Hand the lock to the next client's longest waiter (that client then goes to the
        back of the round), or free it."""
        with self._guard:
            if not self._order:
                self._held = False
                return
            if self._order[0] == self._holder and len(self._order) > 1:
                self._order.rotate(-1)  # the releasing client had its turn: the next client's first
            client = self._order.popleft()
            self._holder = client
            queue = self._queues[client]
            turn = queue.popleft()
            if queue:
                self._order.append(client)
            else:
                del self._queues[client]
            turn.set()

    def others_active(self, client: Hashable = None, window: float = 1.0) -> bool:
        """Whether a client other than ``client`` took or asked for the lock within the last
        ``window`` seconds (waiting now included)."""
        with self._guard:
            now = time.monotonic()
            return any(c != client and (now - t < window or c in self._queues) for c, t in self._seen.items())

    def waiting(self) -> int:
        """Threads waiting for the lock now."""
        with self._guard:
            return sum(len(q) for q in self._queues.values())

    @contextlib.contextmanager
    def turn_of(self, client: Hashable = None, gone: threading.Event | None = None) -> Iterator[None]:
        """``with lock.turn_of(client):`` holds the lock for ``client``'s turn (``gone``: as
        :meth:`acquire`)."""
        self.acquire(client, gone)
        try:
            yield
        finally:
            self.release()

    def __enter__(self) -> "FairLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
