"""Shared fixtures. PostgreSQL-backed tests skip on a machine without a server but
FAIL in CI (CI=true): a missing service must never turn into a green run."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
PG_URL = os.environ.get("CRONWHEEL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def require_service(name: str, error: BaseException) -> None:
    """Skip locally, fail in CI."""
    if IN_CI:
        pytest.fail(f"{name} is required in CI but unavailable: {error}")
    pytest.skip(f"{name} unavailable: {error}")


def require_postgres() -> None:
    """The test server answers (else skip locally, fail in CI)."""
    import psycopg

    try:
        psycopg.connect(PG_URL, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        require_service("PostgreSQL", exc)


@pytest.fixture(autouse=True)
def _isolate_logging():  # type: ignore[no-untyped-def]
    """A test that runs a CLI command in-process configures logging onto pytest's
    captured stderr, which is closed afterwards: restore the defaults after each test."""
    import logging

    import structlog

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
