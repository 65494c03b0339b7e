"""A reconciler loop on ``jobguard.claim_unknown()`` (1.2).

``Reconciler(reconcile).run()`` leases unknown attempts (a batch at a time,
pausing ``wait`` when there are none) and calls ``reconcile(attempt)`` for
each, an ``Unknown`` row: look the attempt up at its provider by
``attempt.provider_key`` and say what the provider says.

- a returned value (a JSON value): the provider did the work, this is its
  result.  The batch's results are recorded together (``finish_many``)
  when the batch ends; each goes through the compare-and-swap as usual.
- ``ProviderRefused`` raised: the provider did not do it.  The attempt
  fails (``fail``), the gate opens, the next attempt gets a new key.
- None returned (or ``InProgress`` raised): the provider does not know yet;
  the attempt stays unknown and another round asks again once the lease
  ends.  Any other exception (the provider could not be asked) also leaves
  it unknown: only the provider's own "no" may fail an attempt.

Exactly once: ``reconcile`` is called at most once per row of one
``claim_unknown`` call, and each answer is reported once (a report lost
with its connection is repeated on a new one; an equal result gets the
same outcome; one that meets a server error that is no refusal of it — a
statement timeout, a serialization failure — is tried again, and one
that still cannot be recorded leaves the attempt unknown).  A server error
in ``claim_unknown`` is logged and the lease tried again with backoff; it
never ends ``run()``.  ``stop()`` (or SIGTERM / SIGINT while ``run()`` is in the
main thread) lets the current call finish, reports the answers of the
batch so far, and returns; the rest of the batch is not asked (its lease
ends).

The decisions are ``jobguard.loop``'s (``ReconcilerCore``, without I/O),
driven here on a psycopg connection and by ``jobguard.aio`` on asyncio.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .api import Unknown
from .loop import ReconcilerCore, ReconcilerStats
from .worker import Link, signals_stop

__all__ = ["Reconciler", "ReconcilerStats", "Reconcile"]

#: what a reconciler calls for each unknown attempt: its result, or None
Reconcile = Callable[[Unknown], Any]


class Reconciler(ReconcilerCore):
    """Leases unknown attempts and runs ``reconcile`` on each; see the module's docstring."""

    def _setup(self) -> None:
        """Its event and its connection."""
        self._stopping = threading.Event()
        self._link = Link(self)

    def run(self, *, until_idle: bool = False, handle_signals: bool = True) -> ReconcilerStats:
        """Lease and reconcile until ``stop()`` (or, with ``until_idle``,
        until a round finds nothing); return the stats.  ``handle_signals``
        (in the main thread): SIGTERM and SIGINT call ``stop()``; a second
        one raises KeyboardInterrupt."""
        with signals_stop(self, handle_signals):
            try:
                self._link.drive(self._loop(until_idle))
            finally:
                self._link.close()
        return self.stats
