"""``cronwheel status``: leader, epoch, queue depth, nodes, recent lateness."""

from __future__ import annotations

import json

import click

from cronwheel.cli.common import open_cli_store, store_option
from cronwheel.store.protocol import WORKER_ALIVE_WITHIN


@click.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--namespace",
    default="default",
    show_default=True,
    help="Namespace whose per-job backlog to show.",
)
@store_option
def status_command(as_json: bool, namespace: str, store_url: str) -> None:
    """Who leads, how deep the queue is, how late recent firings started, and which
    jobs have a backlog (firings scheduled but not finished: a handler slower than
    its interval shows here first), and which jobs breach the lateness objective
    (p99 of their recent first attempts over CRONWHEEL_LATENESS_OBJECTIVE_MS, 200 ms
    by default), which queued firings wait on a task no live worker serves, and
    each namespace's use of its quotas, and the namespace's retention policy."""
    from cronwheel.cli import render

    store = open_cli_store(store_url)
    try:
        doc = render.status_dict(store.status())
        # queued firings per task no live worker serves (every namespace, as queue depth)
        doc["unserved"] = store.unserved_queued(alive_within=WORKER_ALIVE_WITHIN)
        doc["backlog"] = store.job_backlog(namespace, limit=10)
        doc["lateness_objective"] = render.objective_dict(store, namespace)
        doc["quotas"] = [use.to_dict() for use in store.quota_usage()]
        policy = store.get_retention(namespace)
        doc["retention"] = {"namespace": namespace, "policy": policy.describe()}
        doc["retention"] |= policy.to_dict() | {
            "custom": {ns: p.to_dict() for ns, p in store.list_retention().items()}
        }
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        render.status_view(doc)
