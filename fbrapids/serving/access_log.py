"""The service's access log, rate-limited per client.

One line per answered request (the client, its address, the method, path, status and
milliseconds), at most ``burst`` lines of one client at once and ``per_s`` lines a second
after that (a token bucket per client).  Lines past it are held back and counted; the
client's next line let through says how many were, so a flood from one client (or from
each of many addresses) costs a few lines a second each, and every client that was answered
shows up.  The buckets of at most ``max_clients`` clients are kept: past that, the idle ones
are dropped, and their held-back counts are said in one line.

Example:
    >>> import logging
    >>> logger = logging.getLogger("doctest.access"); logger.setLevel(logging.INFO)
    >>> log = AccessLog(logger, per_s=0.001, burst=2)
    >>> [log.record("10.0.0.7", ("10.0.0.7", 5000), "POST", "/score", 200, 3.2) for _ in range(4)]
    [True, True, False, False]
    >>> log.held_back("10.0.0.7"), log.record("10.0.0.8", None, "GET", "/health", 200, 0.4)
    (2, True)
"""

from __future__ import annotations

import logging
import time
from typing import Hashable


class AccessLog:
    """Access lines through ``logger`` at INFO, rate-limited per client (module docstring)."""

    def __init__(self, logger: logging.Logger, per_s: float = 2.0, burst: int = 20, max_clients: int = 4096) -> None:
        self.logger, self.per_s, self.burst, self.max_clients = logger, float(per_s), float(burst), max_clients
        self._buckets: dict[Hashable, list[float]] = {}  # client -> [tokens, last refill, held back]

    def held_back(self, client: Hashable) -> int:
        """Lines of ``client`` held back since its last line let through."""
        return int(self._buckets.get(client, [0.0, 0.0, 0])[2])

    def record(self, client: Hashable, peer: tuple | None, method: str, path: str, status: int, ms: float) -> bool:
        """Log one answered request of ``client`` (from ``peer``), or hold it back; whether
        it was let through."""
        if not self.logger.isEnabledFor(logging.INFO):
            return False
        now = time.monotonic()
        bucket = self._buckets.get(client)
        if bucket is None:
            if len(self._buckets) >= self.max_clients:
                self._drop_idle(now)
            bucket = self._buckets[client] = [self.burst, now, 0]
        bucket[0] = min(self.burst, bucket[0] + (now - bucket[1]) * self.per_s)
        bucket[1] = now
        if bucket[0] < 1.0:
            bucket[2] += 1
            return False
        bucket[0] -= 1.0
        held, bucket[2] = int(bucket[2]), 0
        where = f"{peer[0]}:{peer[1]}" if peer else "-"
        name = where if peer and client == peer[0] else f"{client} ({where})"
        self.logger.info('%s - "%s %s" %d %.1f ms%s', name, method, path[:200], status, ms,
                         f" ({held} earlier lines of this client held back)" if held else "")
        return True

    def _drop_idle(self, now: float) -> None:
        """Forget the clients whose buckets are full again (all, when none is); one line for
        the lines they held back."""
        idle = [c for c, (tokens, last, _) in self._buckets.items() if tokens + (now - last) * self.per_s >= self.burst]
        gone = idle or list(self._buckets)
        held = sum(int(self._buckets.pop(c)[2]) for c in gone)
        if held:
            self.logger.info("%d access lines of %d clients were held back (their counts dropped: at most %d clients "
                             "are tracked)", held, len(gone), self.max_clients)
