"""``partitions`` (PostgreSQL): what the number of day partitions of firings costs the
hot paths. For each count N, a fresh database whose firings have day partitions for
today, the N - 1 days before it and tomorrow (empty: only their number differs); one
``enqueue_now`` and one claim + completion through the store (soak's hot paths), the
median of ``calls`` calls, three times, the median of the three. The leader keeps
about ``keep_for`` + 2 partitions (README "Partitions by day"): 9 with the default
7 days, 32 with 30."""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from cronwheel.bench.runner import fresh_store
from cronwheel.bench.soak import hot_paths

DEFAULT_COUNTS = (2, 10, 40)  # days back from today (tomorrow's is made too)
ROUNDS = 3


def run_partitions(
    url: str, counts: Sequence[int] = DEFAULT_COUNTS, calls: int = 50
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for n in counts:
        with tempfile.TemporaryDirectory() as tmp, fresh_store(url, Path(tmp)) as (_u, store):
            store.migrate()
            pg: Any = store  # PostgresStore: db, partitions
            now = store.now()

            def make(tx: Any, now: Any = now, n: int = n) -> None:
                for i in range(n):
                    tx.one("partition_ensure", {"at": now - i * timedelta(days=1)})

            pg.db.write(make, atomic=False)
            held = len([p for p in pg.partitions() if p[0] != "firings_legacy"])
            runs = []
            for r in range(ROUNDS):
                runs.append(hot_paths(store, calls=calls, prefix=f"p{r}"))
            rows.append(
                {
                    "partitions": held,
                    "enqueue_ms": round(statistics.median(x["enqueue_ms"] for x in runs), 2),
                    "claim_ms": round(statistics.median(x["claim_ms"] for x in runs), 2),
                }
            )
    base = rows[0]
    for row in rows:
        for key in ("enqueue_ms", "claim_ms"):
            row[key.replace("_ms", "_ratio")] = round(row[key] / base[key], 2)
    return {"workload": "partitions", "calls": calls, "rows": rows}
