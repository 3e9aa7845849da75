"""The guarded server's open connections, and which of them may be closed to make room.

A connection is *unproven* from the moment it opens until one of its requests passes the
gate's checks from the headers (the token, when there is one): until then the server knows
nothing of it but its address.  Idle unproven connections are what an attacker without a
token can hold, so they are capped, and closed first when room is needed:

* per source address, at most ``address_connections`` unproven connections: a new one past
  that closes the address's oldest idle unproven one (the newest is the one most likely
  about to send a request);
* all unproven connections together hold at most ``max_connections - connection_reserve``:
  the reserve is for connections that carry authorised calls (and ``/health``).  Past it, or
  at ``max_connections`` in all, a new connection closes the oldest idle unproven one of the
  address holding the most, else the least recently used idle proven one (a keep-alive
  connection between calls); only when every connection is in a call is the new one closed
  instead;
* once three quarters of ``max_connections`` are open, the unproven connections idle for
  more than ``crowded_header_timeout_s`` (instead of ``header_timeout_s``) of the addresses
  holding more than their share of the room for unproven ones are closed.

So a new connection always finds room unless every open connection carries a call in
progress, and the gate bounds those (:mod:`fbrapids.serving.guard`: each client's calls and
queued calls, shared fairly).  Every close is counted in ``counts`` (``connections_evicted``,
``connections_refused``).

The table also tells the gate when a connection is lost (:meth:`ConnectionTable.watch`):
a call whose client hung up is dropped where it waits, and between slices of scoring.

A *connection* here is anything with ``peer`` (the ``(address, port)`` it comes from),
``idle()`` (no request in progress on it) and ``close()``; the guarded protocol's
connections are (:func:`fbrapids.serving.guard.guarded_protocol`).

Example:
    >>> class Conn:
    ...     def __init__(self, port, address="10.0.0.9"):
    ...         self.peer, self.closed = (address, port), False
    ...     def idle(self):
    ...         return True
    ...     def close(self):
    ...         self.closed = True
    >>> table = ConnectionTable(max_connections=4, connection_reserve=1, address_connections=2)
    >>> conns = [Conn(p) for p in range(3)]
    >>> [table.opened(c) for c in conns], [c.closed for c in conns]
    ([True, True, True], [True, False, False])
    >>> table.proven(("10.0.0.9", 1), "ci"); table.unproven_count("10.0.0.9"), table.counts["connections_evicted"]
    (1, 1)
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Callable, Hashable, Iterable, Protocol

log = logging.getLogger(__name__)
GONE = object()  #: what a watcher of a connection already lost is handed back


class Connection(Protocol):
    """What the table needs of a connection (the guarded protocol's,
    :func:`~fbrapids.serving.guard.guarded_protocol`)."""

    peer: tuple  #: the client's address (host, port)

    def idle(self) -> bool:
        """No request in progress: the connection may be closed to make room."""

    def close(self) -> None:
        """Close the connection."""


class ConnectionTable:
    """The open connections and their eviction order (module docstring)."""

    def __init__(self, max_connections: int = 512, connection_reserve: int = 64, address_connections: int = 64,
                 crowded_header_timeout_s: float = 1.0, counts: dict[str, int] | None = None) -> None:
        self.max_connections, self.reserve = max_connections, min(connection_reserve, max_connections - 1)
        self.address_connections, self.crowded_header_timeout_s = address_connections, crowded_header_timeout_s
        self.counts = counts if counts is not None else {"connections_evicted": 0, "connections_refused": 0}
        for k in ("connections_evicted", "connections_refused"):
            self.counts.setdefault(k, 0)
        self._open: dict[tuple, Connection] = {}  # peer -> connection
        self._unproven: collections.OrderedDict[Connection, float] = collections.OrderedDict()  # oldest first
        self._by_address: dict[str, collections.OrderedDict[Connection, None]] = {}
        self._proven: collections.OrderedDict[Connection, Hashable] = collections.OrderedDict()  # least recently used first
        self._watchers: dict[tuple, dict[int, Callable[[], None]]] = {}
        self._next_watch = 0
        self._seen_any = False  # whether the server registers its connections here (the guarded protocol)

    def __len__(self) -> int:
        return len(self._open)

    def unproven_count(self, address: str | None = None) -> int:
        """Unproven connections open now (from ``address``, or in all)."""
        return len(self._unproven) if address is None else len(self._by_address.get(address, ()))

    def opened(self, conn: Connection) -> bool:
        """Register a new connection, closing others to make room (module docstring); False
        when it could not be made room for (the caller closes it)."""
        self._seen_any = True
        address = conn.peer[0]
        mine = self._by_address.get(address)
        if mine is not None and len(mine) >= self.address_connections:
            self._evict_first(mine)
        crowded = len(self._unproven) >= self.max_connections - self.reserve
        if (crowded or len(self._open) >= self.max_connections) and not self._evict_unproven():
            if len(self._open) >= self.max_connections and not self._evict_first(self._proven):
                self.counts["connections_refused"] += 1
                return False
        self._open[conn.peer] = conn
        self._unproven[conn] = time.monotonic()
        self._by_address.setdefault(address, collections.OrderedDict())[conn] = None
        if len(self._open) >= 3 * self.max_connections // 4:
            self._close_stale_unproven()
        return True

    def _evict_unproven(self) -> bool:
        """Close the oldest idle unproven connection of the address holding the most (then of
        the next one): a client's own new connection is never the price of another's many."""
        for _, conns in sorted(self._by_address.items(), key=lambda kv: -len(kv[1])):
            if self._evict_first(conns):
                return True
        return False

    def _evict_first(self, candidates: Iterable[Connection]) -> bool:
        """Close the first idle connection of ``candidates`` (oldest first); whether one was."""
        for conn in candidates:
            if conn.idle():
                self._evict(conn, "to make room for a new one")
                return True  # at once: ``candidates`` changed
        return False

    def _evict(self, conn: Connection, why: str) -> None:
        self.lost(conn)
        self.counts["connections_evicted"] += 1
        log.warning("closed an idle connection %s (%d open, max_connections=%d)", why, len(self._open),
                    self.max_connections)
        conn.close()

    def _close_stale_unproven(self) -> None:
        """Crowded: close the unproven connections idle longer than ``crowded_header_timeout_s``
        of the addresses holding more than their share of the room for unproven ones (a
        client with a connection or two, waiting for its head to be read in a flood, keeps them)."""
        limit = time.monotonic() - self.crowded_header_timeout_s
        share = (self.max_connections - self.reserve) / max(1, len(self._by_address))
        stale = []
        for conn, opened in self._unproven.items():
            if opened > limit:
                break
            if len(self._by_address.get(conn.peer[0], ())) > share and conn.idle():
                stale.append(conn)
        for conn in stale:
            self._evict(conn, f"that sent no request within {self.crowded_header_timeout_s:g} s, the server "
                        "being crowded")

    def proven(self, peer: tuple | None, client: Hashable) -> None:
        """A request on the connection from ``peer`` passed the gate's checks for ``client``:
        it leaves the unproven ones (and becomes the most recently used proven one)."""
        conn = self._open.get(tuple(peer)) if peer else None
        if conn is None:
            return
        self._forget_unproven(conn)
        self._proven[conn] = client
        self._proven.move_to_end(conn)

    def _forget_unproven(self, conn: Connection) -> None:
        if self._unproven.pop(conn, None) is not None:
            mine = self._by_address.get(conn.peer[0])
            if mine is not None:
                mine.pop(conn, None)
                if not mine:
                    del self._by_address[conn.peer[0]]

    def lost(self, conn: Connection) -> None:
        """Forget ``conn`` (closed by either side); its watchers are called."""
        peer = conn.peer
        if self._open.get(peer) is conn:
            del self._open[peer]
        self._proven.pop(conn, None)
        self._forget_unproven(conn)
        for callback in self._watchers.pop(peer, {}).values():
            callback()

    def watch(self, peer: tuple | None, callback: Callable[[], None]) -> tuple[tuple, int] | object | None:
        """Call ``callback`` (once) when the connection from ``peer`` is lost: a handle for
        :meth:`unwatch`, or :data:`GONE` (and nothing registered) when it is not open now.
        A peer this table does not know (a server without the guarded protocol) is never lost."""
        if not peer or tuple(peer) not in self._open:
            return GONE if self._seen_any else None
        self._next_watch += 1
        self._watchers.setdefault(tuple(peer), {})[self._next_watch] = callback
        return (tuple(peer), self._next_watch)

    def unwatch(self, handle: object) -> None:
        if not isinstance(handle, tuple):
            return
        peer, key = handle
        watchers = self._watchers.get(peer)
        if watchers is not None:
            watchers.pop(key, None)
            if not watchers:
                del self._watchers[peer]

    def as_dict(self) -> dict[str, int]:
        """``/health``'s view: connections open, unproven, proven."""
        return {"open": len(self._open), "unproven": len(self._unproven), "proven": len(self._proven)}
