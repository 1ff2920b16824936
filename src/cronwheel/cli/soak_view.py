"""``cronwheel bench soak``: the run (bench/soak.py) with a progress bar, and its
table of figures, a store with three hours of history against one with days, with the ratios."""

from __future__ import annotations

import json
from typing import Any

import click


def soak(
    store_url: str | None,
    days: float,
    rate: int,
    count: int | None,
    workers: int,
    concurrency: int,
    runs: int,
    as_json: bool,
) -> None:
    from rich.progress import Progress

    from cronwheel.bench.soak import run_soak

    with Progress(disable=as_json, transient=True) as progress:
        bar = progress.add_task(f"soak ({days:g} days at {rate}/day)", total=None)

        def update(done: int, total: int) -> None:
            progress.update(bar, completed=done, total=total)

        doc = run_soak(
            store_url,
            days=days,
            rate=rate,
            jobs=1000,
            count=count or 2000,
            workers=workers,
            concurrency=concurrency,
            runs=runs,
            progress=update,
        )
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        _table(doc)
    empty, loaded = doc["baseline"], doc["loaded"]
    if empty["lost"] or empty["duplicated"] or loaded["lost"] or loaded["duplicated"]:
        raise click.ClickException("lost or duplicated firings in the soak's runs")


def _table(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    empty, loaded, ratios = doc["baseline"], doc["loaded"], doc["ratios"]
    table = Table(
        title=f"soak: {loaded['store']}, {loaded['history_firings']} firings of history "
        f"({loaded['days']:g} days), load average {doc['load_average']}",
        title_justify="left",
    )
    for col in ("figure", "baseline (3 h)", "loaded", "ratio"):
        table.add_column(col)
    for key, ratio in ratios.items():
        table.add_row(key, str(empty.get(key, "")), str(loaded.get(key, "")), str(ratio))
    for key in ("drain_gated_jobs_per_s", "drain_while_pruning_jobs_per_s", "bytes_per_firing",
                "steady_state_bytes", "pruned_before_drain", "pruned_during_drain",
                "jobs_pruned_before_drain", "jobs_pruned_during_drain", "load_s"):  # fmt: skip
        table.add_row(key, "", str(loaded.get(key)), "")
    for phase, f in loaded.get("pass_steps", {}).items():
        shown = f"{f['steps']} steps, p50 {f['p50_ms']} ms, max {f['max_ms']} ms"
        table.add_row(f"retention pass step: {phase}", "", shown, "")
    Console().print(table)
