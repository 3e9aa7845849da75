"""A first-come, first-served lock: the scorer's model work is handed out in arrival order.

``threading.Lock`` makes no promise of order: a thread that releases it and asks again at
once (a client whose large call is scored slice after slice) usually gets it back before
a thread that has been waiting, so one client could hold the model for a whole large call.
:class:`FairLock` hands the lock to the longest waiter on release, so every waiting call
gets the model between two slices of another's.

Example:
    >>> lock = FairLock()
    >>> with lock:
    ...     lock.waiting()
    0
    >>> lock.acquire(); lock.release()
"""

from __future__ import annotations

import collections
import threading


class FairLock:
    """A non-reentrant lock granted in the order it was asked for (module docstring)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._queue: collections.deque[threading.Event] = collections.deque()
        self._held = False

    def acquire(self) -> None:
        """Wait for the lock: at once if it is free and nobody waits, else after every
        earlier waiter."""
        with self._guard:
            if not self._held and not self._queue:
                self._held = True
                return
            turn = threading.Event()
            self._queue.append(turn)
        turn.wait()  # set by release(): the lock is ours, handed over without becoming free

    def release(self) -> None:
        """Hand the lock to the longest waiter, or free it."""
        with self._guard:
            if self._queue:
                self._queue.popleft().set()
            else:
                self._held = False

    def waiting(self) -> int:
        """Threads waiting for the lock now."""
        with self._guard:
            return len(self._queue)

    def __enter__(self) -> "FairLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
