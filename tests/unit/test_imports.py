"""The package loads lazily: a part of it imports without the heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("structlog", "rich", "click", "fastapi", "psycopg", "prometheus_client", "httpx")


def _loaded(code: str) -> set[str]:
    """The top-level packages in ``sys.modules`` after running ``code`` in a fresh Python."""
    listing = "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    probe = f"{code}\nimport json, sys\n{listing}"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "module",
    [
        "cronwheel.domain.cron",
        "cronwheel.domain.schedules",
        "cronwheel.domain.jobs",
        "cronwheel.wire",
    ],
)
def test_the_domain_imports_without_heavy_libraries(module: str) -> None:
    loaded = _loaded(f"import {module}")
    assert "cronwheel" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_the_dispatcher_and_the_worker_import_no_metrics_or_logging() -> None:
    loaded = _loaded("import cronwheel.dispatch.dispatcher, cronwheel.worker.worker")
    assert loaded.isdisjoint({"prometheus_client", "structlog", "rich"}), loaded


def test_the_probe_sees_heavy_libraries_when_they_are_loaded() -> None:
    assert {"structlog", "prometheus_client"} <= _loaded("import cronwheel.observability.sinks")


def test_the_documented_names_import_from_the_package() -> None:
    import cronwheel

    code = "from cronwheel import App, Client, cron, every, at, now, FakeClock, Context, Retry"
    assert "fastapi" not in _loaded(code)  # the SDK client and App need no web framework
    for name in cronwheel.__all__:
        assert getattr(cronwheel, name) is not None, name
    assert set(cronwheel._WHERE) == set(cronwheel.__all__)
    assert set(cronwheel.__all__) <= set(dir(cronwheel))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = cronwheel.nothing_here


# an App enqueues a firing and a worker runs it: with tracing off, nothing of
# OpenTelemetry is imported, installed or not. (Not the API's process: FastAPI imports
# it by itself when it is installed, for its own telemetry.)
_RUN_ONE = """
import asyncio, os
from cronwheel import App
from cronwheel.worker.worker import Worker
app = App("memory://", allow_unknown_task=True)
@app.task
def t(ctx): pass
app.enqueue("t")
assert asyncio.run(Worker(app.store, app.registry, app.clock).drain_once()) == 1
assert app.tracing is (os.environ.get("CRONWHEEL_TRACING") == "1")
"""


@pytest.mark.parametrize(("switch", "imported"), [("0", False), ("1", True)])
def test_opentelemetry_is_imported_only_when_tracing_is_on(switch: str, imported: bool) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CRONWHEEL_"))}
    listing = "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    result = subprocess.run(
        [sys.executable, "-c", f"{_RUN_ONE}\nimport json, sys\n{listing}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env | {"CRONWHEEL_TRACING": switch},
    )
    loaded = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert ("opentelemetry" in loaded) is imported
