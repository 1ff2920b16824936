"""What tracing costs per firing (README "Tracing", docs/benchmarks.md): one process, the
memory store (no I/O, so the per-firing work of cronwheel itself is what is measured),
N one-shot firings enqueued by ``App.enqueue`` and run by a ``Worker`` (no-op sync
handlers, ``drain_once`` until nothing is left).

    python tests/bench/tracing_overhead.py [--count 5000] [--runs 5] [--mode MODE]
                                           [--store memory|sqlite]

Modes: ``off`` (the default, no hooks), ``api`` (tracing on, the OpenTelemetry API
alone: no SDK configured, spans do not record), ``sdk`` (tracing on, the SDK's
TracerProvider with a BatchSpanProcessor to an exporter that drops spans). Each mode
runs in a fresh interpreter (the global provider is set once per process); the best
and median of ``--runs`` runs are printed, in microseconds per firing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any


def run_once(mode: str, count: int, store: str = "memory") -> tuple[float, float]:
    from cronwheel import App
    from cronwheel.worker.worker import Worker, WorkerConfig

    tracing = mode != "off"
    # (no tracing keyword when off: the script runs against a tree without it too)
    url = "memory://"
    if store == "sqlite":
        import tempfile

        url = f"sqlite:///{tempfile.mkdtemp(prefix='cw-bench-')}/bench.db"
    app = App(url, allow_unknown_task=True, **({"tracing": True} if tracing else {}))

    @app.task
    def noop(ctx: Any) -> None:
        pass

    app.store.id_key()  # the ids' key read once, outside the timings
    t0 = time.perf_counter()
    for _ in range(count):
        app.enqueue("noop")
    t1 = time.perf_counter()
    extra: dict[str, Any] = {}
    if tracing:
        from cronwheel.observability.tracing import Tracing

        extra["hooks"] = Tracing()
    config = WorkerConfig(concurrency=256)
    worker = Worker(app.store, app.registry, app.clock, config=config, **extra)

    async def drain() -> None:
        while await worker.drain_once():
            pass

    t2 = time.perf_counter()
    asyncio.run(drain())
    t3 = time.perf_counter()
    assert worker.stats.succeeded == count
    app.close()
    return (t1 - t0) / count * 1e6, (t3 - t2) / count * 1e6


def child(mode: str, count: int, runs: int, store: str) -> None:
    if mode == "sdk":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Drop(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Drop()))
        trace.set_tracer_provider(provider)
    results = [run_once(mode, count, store) for _ in range(runs)]
    print(json.dumps(results))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mode", choices=["off", "api", "sdk"], action="append")
    parser.add_argument("--child", choices=["off", "api", "sdk"])
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.count, args.runs, args.store)
        return
    print(
        f"{args.count} firings on {args.store}, {args.runs} runs per mode: "
        "us per firing (best / median)"
    )
    for mode in args.mode or ["off", "api", "sdk"]:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                mode,
                "--count",
                str(args.count),
                "--runs",
                str(args.runs),
                "--store",
                args.store,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        results = json.loads(out.strip().splitlines()[-1])
        enq = [r[0] for r in results]
        run = [r[1] for r in results]
        print(
            f"{mode:>4}: enqueue {min(enq):7.1f} / {statistics.median(enq):7.1f}   "
            f"claim+run+complete {min(run):7.1f} / {statistics.median(run):7.1f}"
        )


if __name__ == "__main__":
    main()
