"""The tables of ``cronwheel bench tz-steps`` (bench/tzsteps.py) and ``cronwheel bench
partitions`` (bench/partitions.py)."""

from __future__ import annotations

import json

import click


def tz_steps(from_: str | None, *, smoke: bool, steps: int | None, as_json: bool) -> None:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from cronwheel.bench.tzsteps import run_tz_steps
    from cronwheel.domain.clock import SystemClock
    from cronwheel.domain.schedules import parse_instant

    start = SystemClock().now() if from_ is None else parse_instant(from_, "--from")
    with Progress(disable=as_json, transient=True) as progress:
        bar = progress.add_task("tz-steps", total=None)

        def update(done: int, total: int) -> None:
            progress.update(bar, completed=done, total=total)

        doc = run_tz_steps(start=start, smoke=smoke, steps=steps or 1, progress=update)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    table = Table(
        title=f"cronwheel bench tz-steps: {doc['zones']} zones, {doc['transitions']} "
        f"transitions in the 2 years from {doc['from']}",
        title_justify="left",
    )
    for col in ("expression", "at µs/step", "away µs/step", "at/away", "zones: median", "worst"):
        table.add_column(col)
    for kind, e in doc["expressions"].items():
        table.add_row(
            f"{kind} ({e['expr']})",
            str(e["at_us"]),
            str(e["away_us"]),
            str(e["ratio"]),
            str(e["zone_ratio_median"]),
            f"{e['zone_ratio_worst']} ({e['worst_zone']})",
        )
    Console(width=200).print(table)


def partitions(store_url: str, calls: int, as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from cronwheel.bench.partitions import TIMED, run_partitions

    doc = run_partitions(store_url, calls=calls)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    table = Table(title=f"partitions: hot paths, median of {calls} calls", title_justify="left")
    cols = ("partitions", *TIMED, *(key.replace("_ms", "_ratio") for key in TIMED))
    for col in cols:
        table.add_column(col)
    for row in doc["rows"]:
        table.add_row(*(str(row[c]) for c in cols))
    Console(width=200).print(table)
