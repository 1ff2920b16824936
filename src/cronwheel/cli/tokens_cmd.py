"""``cronwheel tokens create|list|revoke``: bearer tokens of the HTTP API."""

from __future__ import annotations

import json
from typing import Any

import click

from cronwheel.cli.common import open_cli_store, store_option
from cronwheel.domain.firing import format_instant


@click.group("tokens")
def tokens_group() -> None:
    """Create, list and revoke API tokens (each scoped to one namespace and role, or a
    cluster token for the cluster-wide views)."""


@tokens_group.command("create")
@click.option("--namespace", help="The namespace the token acts in (sees only it).")
@click.option(
    "--cluster",
    is_flag=True,
    help="A cluster token instead (role read or admin): /metrics of every namespace, the"
    " dashboard's all-namespace overview, the cluster status; no jobs or firings.",
)
@click.option(
    "--role",
    required=True,
    type=click.Choice(["read", "write", "admin"]),
    help="read: only reads; write/admin: also changes jobs and firings; admin: /metrics.",
)
@click.option("--name", "label", help="A label to recognise the token by.")
@store_option
def create_command(
    namespace: str | None, cluster: bool, role: str, label: str | None, store_url: str
) -> None:
    """Create a token and print it ONCE on stdout (only its hash is stored)."""
    from cronwheel.errors import ValidationError
    from cronwheel.web.tokens import CLUSTER, issue_token

    if cluster == (namespace is not None):
        raise ValidationError("give --namespace NAME or --cluster (one of them)", field="namespace")
    namespace = CLUSTER if cluster else namespace
    assert namespace is not None
    store = open_cli_store(store_url)
    try:
        record, text = issue_token(store, namespace=namespace, role=role, label=label)
    finally:
        store.close()
    scope = "the cluster" if cluster else f"namespace {namespace}"
    click.echo(
        f"created token {record.id} ({scope}, role {role}); store it now, it is not shown again:",
        err=True,
    )
    click.echo(text)


def _row(t: Any) -> dict[str, Any]:
    return {
        "id": t.id,
        "namespace": t.namespace,
        "role": t.role,
        "name": t.label,
        "created_at": format_instant(t.created_at),
        "revoked_at": None if t.revoked_at is None else format_instant(t.revoked_at),
    }


@tokens_group.command("list")
@click.option("--namespace", default=None, help="Only this namespace's tokens.")
@click.option("--json", "as_json", is_flag=True)
@store_option
def list_command(namespace: str | None, as_json: bool, store_url: str) -> None:
    """List tokens (never their secrets)."""
    store = open_cli_store(store_url)
    try:
        rows = [_row(t) for t in store.list_tokens(namespace=namespace)]
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(rows)} token(s)", title_justify="left")
    for col in ("id", "namespace", "role", "name", "created (UTC)", "revoked (UTC)"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            str(r["id"]),
            r["namespace"],
            r["role"],
            r["name"] or "",
            r["created_at"],
            r["revoked_at"] or "",
        )
    Console(highlight=False).print(table)


@tokens_group.command("revoke")
@click.argument("token_id", type=click.IntRange(1))
@store_option
def revoke_command(token_id: int, store_url: str) -> None:
    """Revoke a token: requests with it are refused within a second (an API server
    believes a token record it read for 1 s)."""
    store = open_cli_store(store_url)
    try:
        record = store.revoke_token(token_id)
    finally:
        store.close()
    click.echo(f"revoked token {record.id} (namespace {record.namespace}, role {record.role})")
