"""Remote mode of ``cronwheel jobs`` / ``firings``: ``--url`` (env CRONWHEEL_URL) talks to
``cronwheel api`` with the token in env CRONWHEEL_TOKEN (never a flag: flags end up in
shell history and ``ps``). Without a URL the commands use the local store."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cronwheel.errors import ValidationError

if TYPE_CHECKING:
    from cronwheel.client import Client

F = TypeVar("F", bound=Callable[..., Any])


def url_option(f: F) -> F:
    return click.option(
        "--url",
        envvar="CRONWHEEL_URL",
        default=None,
        help="Use the HTTP API at this URL instead of the store (env CRONWHEEL_URL; "
        "token from env CRONWHEEL_TOKEN).",
    )(f)


def client(url: str, namespace: str | None = None) -> Client:
    """A Client for ``url``; the namespace is the token's, so ``--namespace`` must stay default."""
    from cronwheel.client import Client

    if namespace not in (None, "default"):
        raise ValidationError(
            "does not apply with --url: the API uses the token's namespace", field="--namespace"
        )
    return Client(url, token=os.environ.get("CRONWHEEL_TOKEN") or None)
