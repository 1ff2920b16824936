"""Fault injection for the acceptance tests, loaded by a subprocess whose PYTHONPATH
includes this directory (Python imports ``sitecustomize`` at start-up).

``ACCEPTANCE_SLOW_NOTIFY_S=<seconds>``: every ``threading.Condition.notify`` sleeps
that long first, while its caller still holds the condition's lock (as
``Event.set()`` does). This widens a race window that is otherwise a few
microseconds wide: a signal handler that calls ``Event.set()`` can be re-entered
by a second signal while the first call still holds the event's (non-reentrant)
lock. Inert unless the variable is set.
"""

from __future__ import annotations

import os
import threading
import time

_DELAY_S = float(os.environ.get("ACCEPTANCE_SLOW_NOTIFY_S", "0") or 0)

if _DELAY_S > 0:
    _notify = threading.Condition.notify

    def _slow_notify(self: threading.Condition, n: int = 1) -> None:
        time.sleep(_DELAY_S)
        _notify(self, n)

    threading.Condition.notify = _slow_notify  # type: ignore[method-assign]
