"""``cronwheel bench WORKLOAD``: measured figures, with a progress bar and a table."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from cronwheel.worker.config import WorkerConfig

if TYPE_CHECKING:
    from cronwheel.bench.runner import BenchResult

_RUNNABLE = ["precision", "herd", "drain", "cron-mix", "scale", "failover", "limit", "bulk"]
_WORKLOADS = [*_RUNNABLE, "api", "tz-steps", "soak", "partitions", "smoke", "all"]
DEFAULT_COUNT = {
    "precision": 200,
    "herd": 10_000,
    "drain": 20_000,
    "cron-mix": 100_000,
    "scale": 1_000_000,
    "failover": 200,
    "limit": 50_000,
    "bulk": 10_000,
}
# bench smoke: sized for CI (well under a minute), asserting correctness only
SMOKE: list[tuple[str, int, dict[str, Any]]] = [
    ("precision", 20, {}),
    ("herd", 500, {}),
    ("drain", 500, {}),
    ("cron-mix", 300, {"duration_s": 20.0}),
    ("limit", 5000, {"single_s": 1.0}),
]


@click.command("bench")
@click.argument("workload", type=click.Choice(_WORKLOADS))
@click.option(
    "--store",
    "store_url",
    default=None,
    help="Store URL (default: a fresh temporary SQLite file). With a PostgreSQL URL each "
    "run creates a temporary database on that server and drops it afterwards.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 32),
    default=None,
    help="Worker processes (default 2); api: API processes (`cronwheel api --workers`, default 1).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=WorkerConfig().concurrency,
    show_default=True,
    help="Each worker process's concurrency (default: the worker's own, as a user gets it).",
)
@click.option(
    "--count",
    type=click.IntRange(1, 10_000_000),
    default=None,
    help="Size (default per workload: precision 200, herd 10000, drain 20000, "
    "cron-mix 100000 jobs, scale 1000000 jobs, failover 200, limit 50000 rows, "
    "bulk 10000 jobs and runs; "
    "tz-steps: successive steps per start point, 1).",
)
@click.option(
    "--duration",
    type=click.FloatRange(1, 3600),
    default=None,
    help="cron-mix: seconds of firings to run and check (default 180, at least 5; under "
    "120: seconds-resolution patterns). api: seconds of load per row (default 10).",
)
@click.option(
    "--connections",
    type=click.IntRange(1, 1000),
    default=8,
    show_default=True,
    help="api: wrk's keep-alive connections (one wrk thread).",
)
@click.option(
    "--lease-ttl",
    type=click.FloatRange(1, 60),
    default=2.0,
    show_default=True,
    help="failover: the schedulers' lease TTL in seconds.",
)
@click.option(
    "--runs",
    type=click.IntRange(1, 20),
    default=1,
    show_default=True,
    help="Repeat each workload K times and report the median of each figure "
    "(lost/duplicated: the worst run); soak: its herd, drain and precision runs, on "
    "each side's store loaded once (lost/duplicated: their sum).",
)
@click.option(
    "--from",
    "from_",
    default=None,
    help="tz-steps: RFC 3339 start of the two-year window of transitions (default: now).",
)
@click.option(
    "--smoke",
    is_flag=True,
    help="tz-steps: the CI size (six zones, one step per start point) instead of every "
    "zone. api: 1 s per row, no warm-up.",
)
@click.option(
    "--days",
    type=click.FloatRange(0.001, 400),
    default=None,
    help="soak: days of history loaded (default: 30 on PostgreSQL, 7 on SQLite).",
)
@click.option(
    "--rate",
    type=click.IntRange(1000, 100_000_000),
    default=1_000_000,
    show_default=True,
    help="soak: firings of history per day.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def bench_command(
    workload: str,
    store_url: str | None,
    workers: int | None,
    concurrency: int,
    count: int | None,
    duration: float | None,
    connections: int,
    lease_ttl: float,
    runs: int,
    from_: str | None,
    smoke: bool,
    days: float | None,
    rate: int,
    as_json: bool,
) -> None:
    """Run a benchmark workload against a real store and real processes.

    \b
    precision  one-shot jobs at distinct instants 100 ms apart: lateness p50/p99/max
    herd       jobs all due at the same instant: time until the last one started
    drain      immediate jobs: jobs/s from first start to last completion
    cron-mix   cron jobs in ~35 zones (a third every minute) for --duration, each
               instant checked: lost/duplicated, lateness, firings/s
    scale      1,000,000 jobs through the bulk path: registration rate, store size,
               scheduler peak RSS, due-jobs scan cost at 1M vs 10k (+ its plan)
    failover   (PostgreSQL) SIGKILL the leader of 2 schedulers: takeover time
    limit      the store's own rates: single-row commits, batched inserts,
               enqueue, claims and completions (rows/s)
    bulk       schedule_many/enqueue_many of --count (vs one per call); API batches
    api        (needs wrk) `cronwheel api --auth` under wrk: req/s, p50/p99 per endpoint
    soak       --days of history at --rate/day, then hot paths, scrape, status, pages,
               explain, a drain during retention: ratios to a near-empty store; size
    partitions (PostgreSQL) enqueue, claim + completion, a held start, status, next due
               at 3, 11 and 41 day partitions (--count calls each, default 50): ms, ratios
    tz-steps   (no store) cost of one schedule step at vs away from DST transitions,
               every zone with a transition in the 2 years from --from (--smoke: 6 zones)
    smoke      small precision/herd/drain/cron-mix/limit runs (CI): zero lost/duplicated
    all        every workload at its default size, one table (not api or tz-steps)
    """
    from rich.progress import Progress

    if workload == "tz-steps":
        from cronwheel.cli.bench_views import tz_steps

        tz_steps(from_, smoke=smoke, steps=count, as_json=as_json)
        return
    if duration is not None and duration < 5:
        raise click.BadParameter("at least 5 seconds", param_hint="--duration")
    from cronwheel.store.url import require_shared, sqlite_path

    if store_url is not None:
        require_shared(store_url, "bench")  # its scheduler and workers are processes
    if workload == "api":
        _api(
            store_url,
            workers=workers or 1,
            duration=1.0 if smoke else (duration or 10.0),
            connections=connections,
            warm_up=not smoke,
            runs=runs,
            as_json=as_json,
        )
        return
    is_sqlite = store_url is None or sqlite_path(store_url) is not None
    if workload == "failover" and is_sqlite:
        raise click.UsageError(
            "failover needs a PostgreSQL store (--store postgresql://...): SQLite is one "
            "file on one host, where a second scheduler has nothing to take over"
        )
    if workload == "partitions":
        if is_sqlite or store_url is None:
            raise click.UsageError(
                "partitions needs a PostgreSQL store (--store postgresql://...): SQLite "
                "does not partition firings"
            )
        from cronwheel.cli.bench_views import partitions

        partitions(store_url, count or 50, as_json)
        return
    if workload == "soak":
        from cronwheel.cli.soak_view import soak

        default_days = 7.0 if is_sqlite else 30.0
        soak(store_url, days or default_days, rate, count, workers or 2, concurrency, runs, as_json)
        return
    plan: list[tuple[str, int, dict[str, Any]]]
    if workload == "smoke":
        plan = SMOKE
    elif workload == "all":
        plan = [
            (name, DEFAULT_COUNT[name], {})
            for name in _RUNNABLE
            if not (name == "failover" and is_sqlite)
        ]
    else:
        plan = [(workload, count or DEFAULT_COUNT[workload], {})]
    options: dict[str, Any] = {
        "workers": workers or 2,
        "concurrency": concurrency,
        "duration_s": duration or 180.0,
        "lease_ttl_s": lease_ttl,
    }
    docs: list[dict[str, Any]] = []
    with Progress(disable=as_json, transient=True) as progress:
        for name, n, extra in plan:
            per_run: list[dict[str, Any]] = []
            for k in range(runs):
                label = f"{name} ({n})" + (f" run {k + 1}/{runs}" if runs > 1 else "")
                bar = progress.add_task(label, total=n)

                def update(done: int, total: int, bar: Any = bar) -> None:
                    progress.update(bar, completed=done, total=total)

                doc = _run_undisturbed(store_url, name, n, options | extra, update)
                progress.update(bar, visible=False)
                per_run.append(doc)
            docs.append(median_of_runs(per_run))
    if workload == "all" and is_sqlite and not as_json:
        click.echo("failover skipped: it needs a PostgreSQL store (--store).", err=True)
    if as_json:
        click.echo(json.dumps(docs, indent=2))
    else:
        _table(docs)
    bad = [d for d in docs if d["lost"] or d["duplicated"]]
    if bad:
        raise click.ClickException(
            "lost or duplicated firings: "
            + ", ".join(
                f"{d['workload']}: lost {d['lost']}, duplicated {d['duplicated']}" for d in bad
            )
        )
    if any(d.get("due_plan_index_scan") is False for d in docs):
        raise click.ClickException("the due-jobs query is not an index range scan on jobs_due")


def _api(
    store_url: str | None,
    *,
    workers: int,
    duration: float,
    connections: int,
    warm_up: bool,
    runs: int,
    as_json: bool,
) -> None:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from cronwheel.bench.api import run_api, wrk_path

    if wrk_path() is None:
        raise click.UsageError("bench api needs wrk on PATH (Debian: apt-get install wrk)")
    per_run: list[dict[str, Any]] = []
    with Progress(disable=as_json, transient=True) as progress:
        for k in range(runs):
            bar = progress.add_task("api" + (f" run {k + 1}/{runs}" if runs > 1 else ""))

            def update(done: int, total: int, bar: Any = bar) -> None:
                progress.update(bar, completed=done, total=total)

            per_run.append(
                run_api(
                    store_url,
                    api_workers=workers,
                    duration_s=duration,
                    connections=connections,
                    progress=update,
                    warm_up=warm_up,
                )
            )
    doc = median_of_runs(per_run)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        table = Table(
            title=f"cronwheel bench api: {doc['store']}, {doc['api_workers']} API process(es), "
            f"wrk {doc['connections']} connections, {doc['duration_s']:g} s per row",
            title_justify="left",
        )
        for col in (
            "row",
            "request",
            "req/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "errors",
            "CPU µs/req",
        ):
            table.add_column(col)
        machine = any("machine_cpu_us_per_request" in r for r in doc["rows"].values())
        if machine:  # PostgreSQL on this host: the server's and wrk's share of the cores
            for col in ("server µs/req", "wrk µs/req", "all µs/req", "cores bound /s"):
                table.add_column(col)
        for name, r in doc["rows"].items():
            cells = [
                name,
                r["request"],
                str(r["rps"]),
                str(r["p50_ms"]),
                str(r["p99_ms"]),
                str(r["max_ms"]),
                str(r["errors"]),
                str(r["cpu_us_per_request"]),
            ]
            if machine:
                cells += [
                    str(r.get(k, "-"))
                    for k in (
                        "server_cpu_us_per_request",
                        "wrk_cpu_us_per_request",
                        "machine_cpu_us_per_request",
                        "cores_bound_rps",
                    )
                ]
            table.add_row(*cells)
        Console(width=200).print(table)
    bad = [name for name, r in doc["rows"].items() if r["errors"]]
    if bad:
        raise click.ClickException(
            "answers that were not 2xx (or socket errors): "
            + ", ".join(f"{name}: {doc['rows'][name]['errors']}" for name in bad)
        )


def _run_undisturbed(
    store_url: str | None,
    name: str,
    n: int,
    options: dict[str, Any],
    progress: Callable[[int, int], None],
) -> dict[str, Any]:
    """Run once; on PostgreSQL, repeat (up to 3 times) a run during which the server
    restarted (another test suite's fault injection): its figures would measure the
    restart. A run that still saw a restart is marked ``server_restarted``."""
    from cronwheel.bench.runner import server_started_at
    from cronwheel.errors import StoreUnavailableError

    for attempt in range(3):
        before = server_started_at(store_url)
        try:
            doc = run_workload(store_url, name, n, options, progress).to_dict()
        except StoreUnavailableError:
            if before is None or server_started_at(store_url) == before or attempt == 2:
                raise
            continue
        if server_started_at(store_url) == before:
            return doc
        if attempt == 2:
            doc["server_restarted"] = True
            return doc
    raise AssertionError("unreachable")


def run_workload(
    store_url: str | None,
    name: str,
    n: int,
    options: dict[str, Any],
    progress: Callable[[int, int], None],
) -> BenchResult:
    from cronwheel.bench import runner

    workers: int = options["workers"]
    concurrency: int = options["concurrency"]
    common: dict[str, Any] = {"workers": workers, "concurrency": concurrency, "progress": progress}
    if name == "precision":
        return runner.run_precision(store_url, count=n, spacing_ms=100, **common)
    if name == "herd":
        return runner.run_herd(store_url, count=n, **common)
    if name == "drain":
        return runner.run_drain(store_url, count=n, **common)
    if name == "cron-mix":
        from cronwheel.bench.cronmix import run_cron_mix

        return run_cron_mix(store_url, count=n, duration_s=options["duration_s"], **common)
    if name == "scale":
        from cronwheel.bench.scale import run_scale

        return run_scale(store_url, count=n, **common)
    if name == "failover":
        from cronwheel.bench.failover import run_failover

        return run_failover(
            store_url,
            count=n,
            spacing_ms=100,
            lease_ttl_s=options["lease_ttl_s"],
            **common,
        )
    if name == "limit":
        from cronwheel.bench.limit import run_limit

        return run_limit(
            store_url, count=n, single_s=options.get("single_s", 3.0), progress=progress
        )
    if name == "bulk":
        from cronwheel.bench.bulk import run_bulk

        return run_bulk(
            store_url, count=n, single_s=options.get("single_s", 2.0), progress=progress
        )
    raise click.UsageError(f"unknown workload {name!r}")


def median_of_runs(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from K runs: the median of every numeric figure; lost and duplicated
    from the worst run; a figure that is not a number from the first run (a boolean
    only if true in every run)."""
    if len(docs) == 1:
        return docs[0]
    out = _merge(docs)
    out["runs"] = len(docs)
    return out


def _merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in docs[0]:
        values = [d.get(key) for d in docs]
        if key in ("lost", "duplicated"):
            out[key] = max(v for v in values if isinstance(v, int))
        elif all(isinstance(v, dict) for v in values):
            out[key] = _merge([v for v in values if isinstance(v, dict)])
        elif all(isinstance(v, bool) for v in values):
            out[key] = all(values)
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            med = statistics.median(v for v in values if isinstance(v, int | float))
            is_int = all(isinstance(v, int) for v in values)
            out[key] = round(med) if is_int else round(med, 3)
        else:
            out[key] = values[0]
    return out


def _table(docs: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="cronwheel bench", title_justify="left")
    for col in (
        "workload",
        "store",
        "ran/expected",
        "lost",
        "dup",
        "p50 ms",
        "p99 ms",
        "max ms",
        "figures",
    ):
        table.add_column(col, overflow="fold")
    for d in docs:
        late = d["lateness_ms"]
        extra = {
            k: v
            for k, v in d.items()
            if k
            not in {"workload", "store", "expected", "ran", "lost", "duplicated", "lateness_ms"}
        }
        table.add_row(
            d["workload"],
            d["store"],
            f"{d['ran']}/{d['expected']}",
            str(d["lost"]),
            str(d["duplicated"]),
            str(late.get("p50")),
            str(late.get("p99")),
            str(late.get("max")),
            ", ".join(f"{k}={v}" for k, v in extra.items()),
        )
    Console(width=200).print(table)
