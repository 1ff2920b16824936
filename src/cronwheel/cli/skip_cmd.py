"""``cronwheel jobs skip NAME --at T ... | --next N [--reason TEXT]``: skip occurrences of
a job without pausing it, against the local store or (``--url``) through the API."""

from __future__ import annotations

import click

from cronwheel.cli.common import open_cli_store, shown_ids, store_option
from cronwheel.cli.remote import client, url_option
from cronwheel.domain.firing import format_instant
from cronwheel.domain.skips import MAX_SKIP, SkipResult
from cronwheel.errors import InvalidTransitionError, ValidationError


def _local_who() -> str:
    """Who a skip made on the local store is signed by: the operating-system user."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


@click.command("skip")
@click.argument("name")
@click.option(
    "--at",
    "at_texts",
    multiple=True,
    help="An occurrence to skip, RFC 3339 (repeatable); it must be one of the schedule's.",
)
@click.option(
    "--next",
    "next_n",
    type=int,
    help=f"Skip the next N occurrences from now (1..{MAX_SKIP}).",
)
@click.option("--reason", help="Why (recorded with who asked; shown by jobs explain).")
@click.option("--namespace", default="default", show_default=True, help="Job namespace.")
@store_option
@url_option
def skip_command(
    name: str,
    at_texts: tuple[str, ...],
    next_n: int | None,
    reason: str | None,
    namespace: str,
    store_url: str,
    url: str | None,
) -> None:
    """Skip occurrences of NAME without pausing it: each is recorded SKIPPED (who, why)
    and never runs; a queued or held one is skipped at once; a running or finished one
    is refused."""
    from cronwheel.domain.schedules import parse_instant
    from cronwheel.domain.skips import occurrences_to_skip, skip_reason

    at = [parse_instant(t, "--at") for t in at_texts] if at_texts else None
    if url is not None:
        with client(url, namespace) as api:
            results = api.skip(name, at=at, next=next_n, reason=reason)
    else:
        store = open_cli_store(store_url)
        try:
            job = store.get_job(namespace, name)
            try:
                instants = occurrences_to_skip(job.spec, now=store.now(), at=at, next_n=next_n)
                text = skip_reason(_local_who(), reason)
            except ValidationError as exc:  # name the flag, not the API's field
                raise ValidationError(exc.message, field=f"--{exc.field}") from None
            results = store.skip_occurrences(namespace, name, instants, text)
            results = [shown_ids(store).skip(r) for r in results]  # the API's ids
        finally:
            store.close()
        _refuse_if_all_refused(results)
    for r in results:
        state = f" ({r.state.value})" if r.outcome == "refused" and r.state else ""
        click.echo(f"{format_instant(r.at)}  {r.outcome}{state}  firing {r.firing_id}")
    refused = [r for r in results if r.outcome == "refused"]
    if refused:
        click.echo(
            f"cronwheel: {len(refused)} occurrence(s) not skipped: running or finished",
            err=True,
        )
        raise SystemExit(1)


def _refuse_if_all_refused(results: list[SkipResult]) -> None:
    """As the API: when nothing could be skipped, one error naming the state (exit 2)."""
    if results and all(r.outcome == "refused" for r in results):
        state = results[0].state.value if results[0].state else "unknown"
        raise InvalidTransitionError(
            f"the occurrence {format_instant(results[0].at)} is {state}: only a queued, "
            "held or future occurrence can be skipped",
            field="at",
        )
