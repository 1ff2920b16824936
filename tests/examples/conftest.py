"""The example apps of examples/, run against PostgreSQL: each test gets a fresh schema,
named in its DATABASE_URL (``options=-csearch_path=...``), so the example's own tables
and cronwheel's store live in it, as they would in a project's database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.conftest import PG_URL, require_service
from tests.contract.pg_harness import drop_schema, new_schema

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass
class ExampleDb:
    schema: str
    url: str  # DATABASE_URL of the example: the server's database, the schema first

    def one(self, sql: str) -> tuple[object, ...] | None:
        with psycopg.connect(self.url) as conn:
            return conn.execute(sql).fetchone()  # type: ignore[arg-type]


@pytest.fixture
def example_db() -> Iterator[ExampleDb]:
    try:
        schema = new_schema()
    except psycopg.OperationalError as exc:
        require_service("PostgreSQL", exc)
        return
    try:
        yield ExampleDb(schema=schema, url=f"{PG_URL}?options=-csearch_path%3D{schema}")
    finally:
        drop_schema(schema)


def run_until(
    argv: list[str], *, cwd: Path, env: dict[str, str], done: Callable[[], bool], timeout: float
) -> None:
    """Run a node process until ``done()`` holds (checked every 0.1 s), then stop it with
    SIGTERM as an operator would; fail with its output if ``timeout`` passes first."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        while not done():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out = proc.communicate()[0].decode(errors="replace")
                pytest.fail(f"{argv[1:4]} did not finish the work in {timeout}s:\n{out[-3000:]}")
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


PYTHON = sys.executable
