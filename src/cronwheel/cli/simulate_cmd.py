"""``cronwheel simulate``: what would happen to each occurrence over a period, under
hypothetical outages (of the scheduler, the workers or both), pauses and slow handlers
(cronwheel.simulate). Reads the store (or a jobs file) and never writes to it."""

from __future__ import annotations

import json
from typing import Any

import click

from cronwheel.cli.common import open_cli_store, store_option
from cronwheel.errors import ValidationError

_PLAIN = "fired"  # the fate the table leaves out unless --all


@click.command("simulate")
@click.option("--from", "since_text", required=True, help="RFC 3339 start of the period.")
@click.option("--to", "until_text", required=True, help="RFC 3339 end of the period.")
@click.option(
    "--file",
    "path",
    type=click.Path(dir_okay=False),
    help="Simulate the jobs of this JSON file instead of the store's (see the README).",
)
@click.option("--job", "names", multiple=True, help="Only this job (repeatable).")
@click.option(
    "--outage",
    "outages",
    multiple=True,
    metavar="T1..T2",
    help="No scheduler and no worker from T1 to T2 (repeatable).",
)
@click.option(
    "--scheduler-down",
    "scheduler_down",
    multiple=True,
    metavar="T1..T2",
    help="No scheduler from T1 to T2; the workers run what is queued (repeatable).",
)
@click.option(
    "--workers-down",
    "workers_down",
    multiple=True,
    metavar="T1..T2",
    help="No worker from T1 to T2; the scheduler queues firings (repeatable).",
)
@click.option(
    "--pause",
    "pauses",
    multiple=True,
    metavar="JOB@T1..T2",
    help="JOB is paused from T1 and resumed at T2 (repeatable).",
)
@click.option(
    "--slow",
    "slows",
    multiple=True,
    metavar="JOB=DURATION",
    help="JOB's handler runs for DURATION (90s, 45m, 1h30m; default 0).",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="List every occurrence, not only the ones that did not simply fire.",
)
@click.option("--json", "as_json", is_flag=True, help="Print every occurrence as JSON.")
@click.option("--namespace", default="default", show_default=True, help="Job namespace.")
@store_option
def simulate_command(
    since_text: str,
    until_text: str,
    path: str | None,
    names: tuple[str, ...],
    outages: tuple[str, ...],
    scheduler_down: tuple[str, ...],
    workers_down: tuple[str, ...],
    pauses: tuple[str, ...],
    slows: tuple[str, ...],
    show_all: bool,
    as_json: bool,
    namespace: str,
    store_url: str,
) -> None:
    """Print every occurrence's fate from --from to --to, as the dispatcher and the
    policies would decide it, without running anything or writing to the store."""
    from cronwheel.domain.schedules import parse_instant
    from cronwheel.simulate import (
        Scenario,
        load_jobs_file,
        parse_pause,
        parse_slow,
        parse_window,
        seeds_from_store,
        simulate,
    )

    since, until = parse_instant(since_text, "from"), parse_instant(until_text, "to")
    windows: dict[str, list[Any]] = {}
    for text in pauses:
        name, window = parse_pause(text)
        windows.setdefault(name, []).append(window)
    scenario = Scenario(
        since=since,
        until=until,
        outages=tuple(parse_window(text, "outage") for text in outages),
        scheduler_down=tuple(parse_window(text, "scheduler-down") for text in scheduler_down),
        workers_down=tuple(parse_window(text, "workers-down") for text in workers_down),
        pauses={name: tuple(w) for name, w in windows.items()},
        slow=dict(parse_slow(text) for text in slows),
    )
    if path is not None:
        seeds = [(spec, False) for spec in load_jobs_file(path) if spec.namespace == namespace]
    else:
        store = open_cli_store(store_url)
        try:
            seeds = seeds_from_store(_all_jobs(store, namespace))
        finally:
            store.close()
    if names:
        known = {spec.name for spec, _ in seeds}
        for name in names:
            if name not in known:
                raise ValidationError(
                    f"no job named {name!r} in namespace {namespace!r}", field="job"
                )
        seeds = [(spec, done) for spec, done in seeds if spec.name in names]
    if not seeds:
        raise ValidationError(f"no job to simulate in namespace {namespace!r}", field="job")
    results = simulate(seeds, scenario)
    if as_json:
        doc = scenario.to_dict() | {"jobs": [r.to_dict() for r in results]}
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    _print_tables(results, show_all)


def _all_jobs(store: Any, namespace: str) -> list[Any]:
    """Every job of the namespace, page by page (read only)."""
    from cronwheel.simulate import MAX_JOBS

    jobs: list[Any] = []
    after = 0
    while True:
        page = store.list_jobs(namespace=namespace, after_id=after, limit=500)
        jobs += page
        if len(jobs) > MAX_JOBS:
            raise ValidationError(
                f"the namespace has more than {MAX_JOBS} jobs: choose some with --job",
                field="job",
            )
        if len(page) < 500:
            return jobs
        after = page[-1].id


def _print_tables(results: list[Any], show_all: bool) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 200  # piped output: keep each row on one line
    for result in results:
        counts = ", ".join(f"{fate} {n}" for fate, n in sorted(result.counts().items()))
        console.print(f"[bold]{escape(result.name)}[/bold]: {escape(counts) or 'no occurrence'}")
        rows = [o for o in result.occurrences if show_all or o.fate != _PLAIN]
        if not rows:
            continue
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("occurrence", no_wrap=True)
        table.add_column("UTC", no_wrap=True)
        table.add_column("fate", no_wrap=True)
        table.add_column("why")
        for o in rows:
            instant = "—" if o.instant is None else o.instant.strftime("%Y-%m-%d %H:%M:%S")
            table.add_row(escape(o.nominal), instant, escape(o.fate), escape(o.detail))
        console.print(table)
