"""``cronwheel calendars set|show|list|delete``: a namespace's named calendars (on the
local store, or with ``--url`` through the API with an ``admin`` token for writes).

Setting one re-plans every job of the namespace that names it; deleting one that jobs
name is refused, naming them."""

from __future__ import annotations

import json
from typing import Any

import click

from cronwheel.cli.common import open_cli_store, store_option
from cronwheel.cli.remote import client, url_option

_NS = click.option("--namespace", default="default", show_default=True, help="Namespace.")


@click.group("calendars")
def calendars_group() -> None:
    """Named calendars cron jobs share (`--calendar NAME`): the days they may fire on."""


def _local_doc(store: Any, record: Any, replanned: tuple[str, ...] | None = None) -> Any:
    return record.to_dict() | {
        "jobs": store.calendar_jobs(record.namespace, record.name),
        "replanned": None if replanned is None else list(replanned),
    }


def _print(doc: dict[str, Any]) -> None:
    click.echo(f"calendar {doc['name']} (namespace {doc['namespace']})")
    click.echo(f"  holidays  {doc['holidays'] or '-'}")
    click.echo(f"  weekdays  {doc['weekdays'] or 'every day'}")
    click.echo(f"  exclude   {' '.join(doc['exclude']) or '-'}")
    click.echo(f"  include   {' '.join(doc['include']) or '-'}")
    click.echo(f"  jobs      {', '.join(doc['jobs']) or '-'}")
    if doc.get("replanned") is not None:
        click.echo(f"  replanned {', '.join(doc['replanned']) or '-'}")


def _emit(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        _print(doc)


@calendars_group.command("set")
@click.argument("name")
@click.option("--holidays", help="A built-in calendar's holidays: DE-BY, US, NYSE ...")
@click.option("--exclude", multiple=True, metavar="DATE", help="A date to exclude (repeat).")
@click.option("--include", multiple=True, metavar="DATE", help="A date never excluded (repeat).")
@click.option("--weekdays", help="The weekdays it may fire on, as cron: mon-fri, 1-5.")
@click.option("--json", "as_json", is_flag=True)
@_NS
@store_option
@url_option
def set_command(
    name: str,
    holidays: str | None,
    exclude: tuple[str, ...],
    include: tuple[str, ...],
    weekdays: str | None,
    as_json: bool,
    namespace: str,
    store_url: str,
    url: str | None,
) -> None:
    """Create or replace calendar NAME (lower case); the jobs naming it are re-planned."""
    from cronwheel.domain.calendars import CalendarRules, check_stored_name

    check_stored_name(name, field_name="NAME")
    doc = {
        "holidays": holidays,
        "exclude": list(exclude),
        "include": list(include),
        "weekdays": weekdays,
    }
    rules = CalendarRules.from_dict(doc, prefix="--")  # one error naming the option
    if url:
        with client(url, namespace) as api:
            _emit(api.put_calendar(name, doc), as_json)
        return
    store = open_cli_store(store_url)
    try:
        change = store.set_calendar(namespace, name, rules)
        _emit(_local_doc(store, change.calendar, change.replanned), as_json)
    finally:
        store.close()


@calendars_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@_NS
@store_option
@url_option
def show_command(name: str, as_json: bool, namespace: str, store_url: str, url: str | None) -> None:
    """Calendar NAME's rules and the jobs that name it."""
    if url:
        with client(url, namespace) as api:
            _emit(api.get_calendar(name), as_json)
        return
    from cronwheel.store.calendar_port import no_calendar

    store = open_cli_store(store_url)
    try:
        record = store.get_calendar(namespace, name)
        if record is None:
            raise no_calendar(namespace, name)
        _emit(_local_doc(store, record), as_json)
    finally:
        store.close()


@calendars_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@_NS
@store_option
@url_option
def list_command(as_json: bool, namespace: str, store_url: str, url: str | None) -> None:
    """The namespace's calendars."""
    if url:
        with client(url, namespace) as api:
            docs = api.list_calendars()
    else:
        store = open_cli_store(store_url)
        try:
            docs = [_local_doc(store, r) for r in store.list_calendars(namespace)]
        finally:
            store.close()
    if as_json:
        click.echo(json.dumps(docs, indent=2, ensure_ascii=False))
        return
    for doc in docs:
        rules = [
            f"holidays {doc['holidays']}" if doc["holidays"] else "",
            f"weekdays {doc['weekdays']}" if doc["weekdays"] else "",
            f"{len(doc['exclude'])} excluded" if doc["exclude"] else "",
            f"{len(doc['include'])} included" if doc["include"] else "",
        ]
        shown = ", ".join(r for r in rules if r) or "every day"
        click.echo(f"{doc['name']}  {shown}  ({len(doc['jobs'])} jobs)")


@calendars_group.command("delete")
@click.argument("name")
@_NS
@store_option
@url_option
def delete_command(name: str, namespace: str, store_url: str, url: str | None) -> None:
    """Delete calendar NAME (refused while jobs name it)."""
    if url:
        with client(url, namespace) as api:
            api.delete_calendar(name)
    else:
        store = open_cli_store(store_url)
        try:
            store.delete_calendar(namespace, name)
        finally:
            store.close()
    click.echo(f"deleted calendar {name}")
