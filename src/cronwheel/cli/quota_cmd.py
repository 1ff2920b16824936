"""``cronwheel quota show|set NAMESPACE``: a namespace's quotas, set by the cluster's
operator (whoever holds the store's credentials). A namespace's own admin token may
only lower them (``PUT /v1/quota``): a quota protects the other namespaces from it."""

from __future__ import annotations

import json
from typing import Any

import click

from cronwheel.cli.common import open_cli_store, store_option
from cronwheel.domain.quotas import QuotaUse


@click.group("quota")
def quota_group() -> None:
    """Show or set a namespace's quotas (without a record of its own, a namespace has
    the cluster's defaults)."""


def _show(use: QuotaUse, as_json: bool) -> None:
    doc = use.to_dict()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    where = "its own" if use.custom else "the defaults"
    click.echo(f"namespace {use.namespace} ({where})")
    for name, limit in doc["limits"].items():
        used = doc["used"].get(name)
        text = f"{limit}" if used is None else f"{used} / {limit}"
        click.echo(f"  {name:<20} {text}")
    if doc["skipped_firings"]:
        click.echo(f"  scheduled firings skipped over firings_per_minute: {doc['skipped_firings']}")


@quota_group.command("show")
@click.argument("namespace")
@click.option("--json", "as_json", is_flag=True)
@store_option
def show_command(namespace: str, as_json: bool, store_url: str) -> None:
    """A namespace's quotas and what it uses of them now."""
    store = open_cli_store(store_url)
    try:
        use = store.quota_usage(namespace)[0]
    finally:
        store.close()
    _show(use, as_json)


@quota_group.command("set")
@click.argument("namespace")
@click.option("--jobs", type=int, help="Registered jobs (immediate one-shots not counted).")
@click.option("--firings-per-minute", type=int, help="Firings created per minute.")
@click.option("--min-interval", help="Shortest gap between two firings of a schedule (e.g. 1s).")
@click.option("--running", type=int, help="Firings held by workers (claimed or running).")
@click.option("--backfill", type=int, help="Instants of one trigger or backfill call.")
@click.option("--backfill-per-day", type=int, help="Firings added by trigger/backfill per day.")
@click.option("--json", "as_json", is_flag=True)
@store_option
def set_command(namespace: str, as_json: bool, store_url: str, **limits: Any) -> None:
    """Set some of a namespace's quotas (the others keep their values)."""
    changes = {k: v for k, v in limits.items() if v is not None}
    if not namespace.strip():
        raise click.BadParameter("must not be empty", param_hint="NAMESPACE")
    if not changes:
        raise click.UsageError("give at least one quota to set (see --help)")
    store = open_cli_store(store_url)
    try:
        store.set_quota(namespace, changes)
        use = store.quota_usage(namespace)[0]
    finally:
        store.close()
    _show(use, as_json)
