"""``cronwheel firings list|show|cancel|retry``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import click

from cronwheel.cli.common import local_firing_id, open_cli_store, shown_ids, store_option
from cronwheel.cli.remote import client, url_option
from cronwheel.domain.attempts import Attempt, lateness_of
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import Firing, FiringId
from cronwheel.wire import lateness_ms

_STATES = [s.value for s in FiringState]


@click.group("firings")
def firings_group() -> None:
    """Inspect and control firings (one occurrence of a job each)."""


@firings_group.command("list")
@click.option("--job", "job_name", help="Only this job's firings.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(_STATES),
    help="Only these states (repeatable).",
)
@click.option("--scheduled-from", "scheduled_from", help="Scheduled at or after (RFC 3339).")
@click.option("--scheduled-to", "scheduled_to", help="Scheduled before (RFC 3339).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--namespace", default="default", show_default=True)
@store_option
@url_option
def list_command(
    job_name: str | None,
    states: tuple[str, ...],
    scheduled_from: str | None,
    scheduled_to: str | None,
    limit: int,
    as_json: bool,
    namespace: str,
    store_url: str,
    url: str | None,
) -> None:
    """List recent firings of the namespace (or of one job), newest first."""
    from itertools import islice

    from cronwheel.cli import render
    from cronwheel.domain.schedules import parse_instant

    lo = None if scheduled_from is None else parse_instant(scheduled_from, "--scheduled-from")
    hi = None if scheduled_to is None else parse_instant(scheduled_to, "--scheduled-to")
    if url is not None:
        with client(url, namespace) as api:
            pages = api.list_firings(
                job_name,
                states=list(states) or None,
                scheduled_from=lo,
                scheduled_to=hi,
                page_size=min(limit, 500),
            )
            firings = list(islice(pages, limit))
            late = _retried_lateness(firings, api.list_attempts)
    else:
        firings, late = _list_local(store_url, job_name, states, (lo, hi), limit, namespace)
    if as_json:
        docs = [f.to_dict() for f in firings]
        for doc in docs:
            if doc["id"] in late:
                doc["lateness_ms"] = lateness_ms(late[doc["id"]])
        click.echo(json.dumps(docs, indent=2, ensure_ascii=False))
    else:
        render.firings_table(firings, lateness=late)


def _retried_lateness(
    firings: list[Firing], attempts_of_id: Callable[[FiringId], Sequence[Attempt]]
) -> dict[int, timedelta | None]:
    """A retried firing's lateness is its first attempt's: read from its attempts."""
    return {f.id: lateness_of(f, attempts_of_id) for f in firings if f.attempt > 1}


def _list_local(
    store_url: str,
    job_name: str | None,
    states: tuple[str, ...],
    scheduled: tuple[datetime | None, datetime | None],
    limit: int,
    namespace: str,
) -> tuple[list[Firing], dict[int, timedelta | None]]:
    store = open_cli_store(store_url)
    try:
        job_id = store.get_job(namespace, job_name).id if job_name else None
        firings = store.list_firings(
            job_id=job_id,
            namespace=namespace,
            states=[FiringState(s) for s in states] or None,
            scheduled_from=scheduled[0],
            scheduled_to=scheduled[1],
            limit=limit,
        )
        late = _retried_lateness(firings, store.list_attempts)
        ids = shown_ids(store)
        shown_late = {ids.encode("firing", k): v for k, v in late.items()}
        return [ids.firing(f) for f in firings], shown_late
    finally:
        store.close()


@firings_group.command("show")
@click.argument("firing_id", type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True)
@store_option
@url_option
def show_command(firing_id: int, as_json: bool, store_url: str, url: str | None) -> None:
    """Show one firing: state, timings, error, and every attempt (worker, claimed,
    started, finished, outcome, error); its lateness is its first attempt's."""
    from cronwheel.cli import render
    from cronwheel.domain.attempts import first_lateness

    if url is not None:
        with client(url) as api:
            firing = api.get_firing(firing_id)
            attempts = api.list_attempts(firing_id)
    else:
        store = open_cli_store(store_url)
        try:
            internal = local_firing_id(store, firing_id)
            firing = shown_ids(store).firing(store.get_firing(internal))
            attempts = store.list_attempts(internal)
        finally:
            store.close()
    doc = firing.to_dict() | {
        "lateness_ms": lateness_ms(first_lateness(firing, attempts)),
        "attempts": [a.to_dict() for a in attempts],
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        render.firing_detail(doc)


@firings_group.command("cancel")
@click.argument("firing_id", type=click.IntRange(1))
@store_option
@url_option
def cancel_command(firing_id: int, store_url: str, url: str | None) -> None:
    """Cancel a firing: at once if queued, cooperatively if running."""
    if url is not None:
        with client(url) as api:
            result = api.cancel_firing(firing_id)
    else:
        store = open_cli_store(store_url)
        try:
            result = store.cancel_firing(local_firing_id(store, firing_id))
        finally:
            store.close()
    click.echo(f"{result.outcome}: firing {firing_id} is {result.firing.state.value}")


@firings_group.command("retry")
@click.argument("firing_id", type=click.IntRange(1))
@store_option
@url_option
def retry_command(firing_id: int, store_url: str, url: str | None) -> None:
    """Re-drive a DEAD firing: queue it again with a fresh attempt budget."""
    if url is not None:
        with client(url) as api:
            firing = api.retry_firing(firing_id)
    else:
        store = open_cli_store(store_url)
        try:
            firing = store.redrive_firing(local_firing_id(store, firing_id))
        finally:
            store.close()
    click.echo(f"queued: firing {firing_id} will run again (attempt {firing.attempt + 1})")
