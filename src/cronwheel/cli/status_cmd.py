"""``cronwheel status``: leader, epoch, queue depth, nodes, recent lateness."""

from __future__ import annotations

import json

import click

from cronwheel.cli.common import open_cli_store, store_option


@click.command("status")
@click.option("--json", "as_json", is_flag=True)
@store_option
def status_command(as_json: bool, store_url: str) -> None:
    """Who leads, how deep the queue is, how late recent firings started."""
    from cronwheel.cli import render

    store = open_cli_store(store_url)
    try:
        doc = render.status_dict(store.status())
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        render.status_view(doc)
