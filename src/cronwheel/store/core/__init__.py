"""The store's engine-independent half: every flow written once over a Dialect.

An engine package (``store/sqlite``, ``store/postgres``) supplies a :class:`Dialect`
(its connections, transactions and retry rules, its named queries, a few SQL
fragments) and the hot paths whose SQL really differs (enqueue, claims,
completions, bulk inserts); :class:`CoreStore` does the rest. See
docs/architecture.md, "The store".
"""

from cronwheel.store.core.dialect import Dialect, Tx
from cronwheel.store.core.fair import FairClocks
from cronwheel.store.core.flows import CoreStore

__all__ = ["CoreStore", "Dialect", "FairClocks", "Tx"]
