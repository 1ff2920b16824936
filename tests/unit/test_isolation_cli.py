"""``--isolation`` of ``cronwheel worker``: reaches the worker's config; a bad value is a
usage error naming the option (exit code 2), and nothing starts."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from cronwheel.cli.main import cli
from cronwheel.worker.config import WorkerConfig


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[WorkerConfig]:
    seen: list[WorkerConfig] = []

    def fake_run_worker(app: Any, config: WorkerConfig, **_: Any) -> None:
        seen.append(config)

    monkeypatch.setattr("cronwheel.node.run_worker", fake_run_worker)
    return seen


def test_isolation_process_reaches_the_worker(started: list[WorkerConfig], tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path / 'cw.db'}"
    result = CliRunner().invoke(cli, ["worker", "--store", store, "--isolation", "process"])
    assert result.exit_code == 0, result.output
    assert [c.isolation for c in started] == ["process"]
    CliRunner().invoke(cli, ["worker", "--store", store])
    assert started[-1].isolation == "auto"


def test_a_bad_isolation_is_a_usage_error(started: list[WorkerConfig]) -> None:
    result = CliRunner().invoke(cli, ["worker", "--isolation", "fork"])
    assert result.exit_code == 2
    assert "--isolation" in result.output and "'fork'" in result.output
    assert started == []


def test_a_bad_worker_config_names_the_field() -> None:
    from cronwheel.errors import ValidationError

    with pytest.raises(ValidationError) as info:
        WorkerConfig(isolation="fork")  # type: ignore[arg-type]
    assert info.value.field == "isolation"


def test_clock_bounds_reach_the_worker(started: list[WorkerConfig], tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path / 'cw.db'}"
    args = ["--max-clock-offset", "2.5", "--max-clock-uncertainty", "20"]
    result = CliRunner().invoke(cli, ["worker", "--store", store, *args])
    assert result.exit_code == 0, result.output
    bounds = started[-1].clock_bounds
    assert bounds.max_offset.total_seconds() == 2.5
    assert bounds.max_uncertainty.total_seconds() == 0.020
    CliRunner().invoke(cli, ["worker", "--store", store])
    assert started[-1].clock_bounds.max_offset.total_seconds() == 10
    assert started[-1].clock_bounds.max_uncertainty.total_seconds() == 0.050


@pytest.mark.parametrize(
    ("option", "value"), [("--max-clock-offset", "0"), ("--max-clock-uncertainty", "-5")]
)
def test_a_bad_clock_bound_is_a_usage_error(
    started: list[WorkerConfig], option: str, value: str
) -> None:
    result = CliRunner().invoke(cli, ["worker", option, value])
    assert result.exit_code == 2
    assert option in result.output
    assert started == []
