"""``cronwheel history prune|retention``: the finished history the store keeps
(domain/retention.py). ``prune`` shows what the retention policies would delete now
and, with ``--apply``, deletes it (the leader's retention pass does the same every
few minutes); ``retention`` shows or sets a namespace's policy."""

from __future__ import annotations

import json

import click

from cronwheel.cli.common import open_cli_store, store_option
from cronwheel.domain.retention import MAX_KEEP_LAST, PruneReport, Retention


@click.group("history")
def history_group() -> None:
    """The finished history kept: retention policies and pruning."""


def _show_report(report: PruneReport, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    verb = "would delete" if report.dry_run else "deleted"
    outcomes = ", ".join(f"{n} {s}" for s, n in sorted(report.firings.items())) or "nothing"
    click.echo(f"{verb}: {report.deleted} finished firings ({outcomes})")
    click.echo(f"{verb}: {report.jobs} finished one-shot jobs with their firing")
    click.echo(f"looked at {report.scanned} finished firings past the shortest keep_for")
    if report.dry_run:
        click.echo("dry run: nothing was deleted (--apply deletes)")


@history_group.command("prune")
@click.option("--apply", "apply_", is_flag=True, help="Delete (default: only show).")
@click.option("--namespace", default=None, help="Only this namespace (default: every one).")
@click.option("--json", "as_json", is_flag=True)
@store_option
def prune_command(apply_: bool, namespace: str | None, as_json: bool, store_url: str) -> None:
    """What the retention policies no longer keep: shown, or deleted with --apply.
    Never a firing that is queued, claimed or running."""
    store = open_cli_store(store_url)
    try:
        report = store.prune_history(dry_run=not apply_, namespace=namespace)
    finally:
        store.close()
    _show_report(report, as_json)


def show_policy(namespace: str, policy: Retention, custom: bool, as_json: bool) -> None:
    if as_json:
        doc = {"namespace": namespace, "custom": custom} | policy.to_dict()
        click.echo(json.dumps(doc, indent=2))
        return
    where = "its own" if custom else "the default"
    click.echo(f"namespace {namespace} ({where}): {policy.describe()}")


@history_group.command("retention")
@click.argument("namespace", default="default")
@click.option("--keep-for", help="Keep finished firings this long (e.g. 7d, 12h; 0: by age none).")
@click.option("--keep-last", help="Keep the last N firings per outcome per job (0-1000).")
@click.option("--reset", is_flag=True, help="Back to the default (7d, the last 1).")
@click.option("--json", "as_json", is_flag=True)
@store_option
def retention_command(
    namespace: str,
    keep_for: str | None,
    keep_last: str | None,
    reset: bool,
    as_json: bool,
    store_url: str,
) -> None:
    """Show or set NAMESPACE's retention policy (jobs may override it with their
    keep_for / keep_last policies)."""
    from cronwheel.domain.numbers import parse_number
    from cronwheel.domain.policy_table import parse_seconds_or_duration

    changes: dict[str, object] = {}
    if keep_for is not None:
        changes["keep_for"] = parse_seconds_or_duration(keep_for, "keep_for")
    if keep_last is not None:
        changes["keep_last"] = parse_number(keep_last.strip(), "keep_last", high=MAX_KEEP_LAST)
    if reset and changes:
        raise click.UsageError("give --reset or new values, not both")
    if not namespace.strip():
        raise click.BadParameter("must not be empty", param_hint="NAMESPACE")
    store = open_cli_store(store_url)
    try:
        if reset:
            store.reset_retention(namespace)
        elif changes:
            store.set_retention(namespace, changes)
        policy = store.get_retention(namespace)
        custom = namespace in store.list_retention()
    finally:
        store.close()
    show_policy(namespace, policy, custom, as_json)
