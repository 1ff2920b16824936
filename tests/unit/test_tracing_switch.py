"""Turning tracing on (observability/tracing_switch.py): explicit only, a clear error
naming the setting when it cannot be."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from cronwheel.app import App
from cronwheel.cli.main import cli
from cronwheel.errors import ValidationError
from cronwheel.observability import tracing_switch
from cronwheel.observability.tracing_switch import TRACING_ENV, tracing_wanted


def test_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACING_ENV, raising=False)
    assert tracing_wanted(None) is False
    assert App("memory://").tracing is False
    for value in ("1", "true", "ON"):
        monkeypatch.setenv(TRACING_ENV, value)
        assert tracing_wanted(None) is True
    monkeypatch.setenv(TRACING_ENV, "0")
    assert tracing_wanted(True) is True  # the explicit flag wins
    assert App("memory://", tracing=True).tracing is True


def test_a_bad_variable_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRACING_ENV, "maybe")
    with pytest.raises(ValidationError) as err:
        App("memory://")
    assert err.value.field == TRACING_ENV and "1 or 0" in str(err.value)


def test_on_without_the_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing_switch.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValidationError) as err:
        App("memory://", tracing=True)
    assert err.value.field == "tracing"
    assert "pip install 'cronwheel[otel]'" in str(err.value)
    monkeypatch.setenv(TRACING_ENV, "1")
    with pytest.raises(ValidationError) as err:
        App("memory://")
    assert err.value.field == TRACING_ENV
    assert tracing_wanted(False) is False  # off needs nothing


def test_the_cli_flag_turns_it_on_for_the_app_and_its_children(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    apps: list[Any] = []
    monkeypatch.setattr("cronwheel.node.run_worker", lambda app, config, **_: apps.append(app))
    monkeypatch.delenv(TRACING_ENV, raising=False)
    # a module of its own, imported by this run (as in a fresh worker process)
    module = f"traced_cli_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text("from cronwheel import App\napp = App()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    store = f"sqlite:///{tmp_path / 'cw.db'}"
    result = CliRunner().invoke(cli, ["worker", f"{module}:app", "--store", store, "--tracing"])
    assert result.exit_code == 0, result.output
    assert [a.tracing for a in apps] == [True]
    assert os.environ[TRACING_ENV] == "1"  # what serve's children inherit
    monkeypatch.delenv(TRACING_ENV)


def test_the_cli_flag_without_the_extra_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr("cronwheel.node.run_worker", lambda *a, **k: pytest.fail("started"))
    monkeypatch.setattr(tracing_switch.importlib.util, "find_spec", lambda name: None)
    monkeypatch.delenv(TRACING_ENV, raising=False)
    store = f"sqlite:///{tmp_path / 'cw.db'}"
    result = CliRunner().invoke(cli, ["worker", "--store", store, "--tracing"])
    assert result.exit_code == 2
    assert "--tracing" in result.output and "cronwheel[otel]" in result.output
    assert TRACING_ENV not in os.environ
