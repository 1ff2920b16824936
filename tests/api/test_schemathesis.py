"""Property-based fuzzing of the whole API from its OpenAPI document (schemathesis,
in-process over ASGI), authenticated with a write token: zero server errors.

The app and its store live for the module (the schema is loaded at collection);
the store is a temp SQLite file removed at the end.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error

from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import cron
from cronwheel.server import create_app
from cronwheel.web.tokens import issue_token
from tests.api.conftest import NS, T0, make_store

_DIR = Path(tempfile.mkdtemp(prefix="cronwheel-fuzz-"))
_STORE = make_store(_DIR, FakeClock(T0))
_TOKEN = issue_token(_STORE, namespace=NS, role="write")[1]
# something for generated names and ids to hit
_STORE.create_job(
    JobSpec(name="a", task="t", schedule=cron("0 9 * * *"), namespace=NS), first_fire_at=T0
)
_STORE.add_firings(NS, "a", [T0], note="fuzz")

schema = schemathesis.openapi.from_asgi(
    "/openapi.json", create_app(_STORE, auth_required=True, validate_responses=False)
)
# valid and invalid inputs both (invalid ones must be 4xx, never 5xx)
schema.config.generation.update(modes=list(schemathesis.GenerationMode))


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    _STORE.close()
    shutil.rmtree(_DIR, ignore_errors=True)


@schema.parametrize()
@hypothesis.settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck),
)
def test_no_server_errors(case: Any) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {_TOKEN}"}, checks=[not_a_server_error]
    )
