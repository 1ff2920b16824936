"""``cronwheel bench WORKLOAD``: measured figures, with a progress bar and a table."""

from __future__ import annotations

import json
from typing import Any

import click

_WORKLOADS = ["precision", "herd", "drain", "smoke"]


@click.command("bench")
@click.argument("workload", type=click.Choice(_WORKLOADS))
@click.option(
    "--store",
    "store_url",
    default=None,
    help="Store URL (default: a fresh temporary SQLite file). A PostgreSQL "
    "database given here is EMPTIED first.",
)
@click.option("--workers", type=click.IntRange(1, 32), default=2, show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 1024), default=64, show_default=True)
@click.option(
    "--count",
    type=click.IntRange(1, 10_000_000),
    default=None,
    help="Firings (default per workload: precision 200, herd 10000, drain 20000).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def bench_command(
    workload: str,
    store_url: str | None,
    workers: int,
    concurrency: int,
    count: int | None,
    as_json: bool,
) -> None:
    """Run a benchmark workload against a real store and real processes.

    \b
    precision  one-shot jobs at distinct instants 100 ms apart: lateness p50/p99/max
    herd       jobs all due at the same instant: time until the last one started
    drain      immediate jobs: jobs/s from first start to last completion
    smoke      small precision + herd + drain runs (CI): asserts zero lost/duplicated
    """
    from rich.progress import Progress

    from cronwheel.bench import runner

    results = []
    plan: list[tuple[str, int]] = (
        [("precision", 20), ("herd", 500), ("drain", 500)]
        if workload == "smoke"
        else [(workload, count or {"precision": 200, "herd": 10_000, "drain": 20_000}[workload])]
    )
    with Progress(disable=as_json, transient=True) as progress:
        for name, n in plan:
            bar = progress.add_task(f"{name} ({n})", total=n)

            def update(done: int, total: int, bar: Any = bar) -> None:
                progress.update(bar, completed=done, total=total)

            common: dict[str, Any] = {
                "workers": workers,
                "concurrency": concurrency,
                "progress": update,
            }
            if name == "precision":
                results.append(runner.run_precision(store_url, count=n, spacing_ms=100, **common))
            elif name == "herd":
                results.append(runner.run_herd(store_url, count=n, **common))
            else:
                results.append(runner.run_drain(store_url, count=n, **common))
    docs = [r.to_dict() for r in results]
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
        "figure",
    ):
        table.add_column(col)
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
