"""The HTTP server's application: the JSON API, the dashboard and ``/metrics``.

``cronwheel api`` serves ``create_app(store, ...)``. The API (``cronwheel.api``) and
the dashboard (``cronwheel.dashboard``) do not know each other: they are put
together here, and share only ``cronwheel.web``.
"""

from __future__ import annotations

from fastapi import FastAPI

from cronwheel.api import create_api
from cronwheel.api.guard import DEFAULT_MAX_BODY
from cronwheel.dashboard import mount
from cronwheel.store.protocol import ApiStore


def create_app(
    store: ApiStore, *, auth_required: bool = True, max_body: int = DEFAULT_MAX_BODY
) -> FastAPI:
    """The API over ``store`` (which the caller opens, migrates and closes), with the
    dashboard at ``/`` and ``/ui/...`` and Prometheus at ``/metrics``."""
    app = create_api(store, auth_required=auth_required, max_body=max_body)
    mount(app)
    return app
