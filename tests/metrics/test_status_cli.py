"""``cronwheel status`` names the jobs that breach the lateness objective."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cronwheel.cli.main import cli

from .helpers import claim_all, finish, make_store, queue


def test_status_lists_jobs_over_the_objective(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path)
    queue(store, "[bold]late[/bold]")
    queue(store, "prompt")
    claims = {c.firing.job_name: c for c in claim_all(store)}
    finish(store, claims["[bold]late[/bold]"], late_ms=450)
    finish(store, claims["prompt"], late_ms=3)
    store.close()
    url = f"sqlite:///{tmp_path / 'm.db'}"
    doc = json.loads(CliRunner().invoke(cli, ["status", "--store", url, "--json"]).output)
    objective = doc["lateness_objective"]
    assert objective["objective_ms"] == 200
    assert [b["job"] for b in objective["breaches"]] == ["[bold]late[/bold]"]
    assert objective["breaches"][0]["p99_ms"] == 450
    text = CliRunner().invoke(cli, ["status", "--store", url]).output
    assert "1 job(s) breach the objective" in text and "[bold]late[/bold]" in text
    monkeypatch.setenv("CRONWHEEL_LATENESS_OBJECTIVE_MS", "1000")
    text = CliRunner().invoke(cli, ["status", "--store", url]).output
    assert "all 2 job(s) within" in text


def test_serve_refuses_a_non_loopback_dashboard_without_tokens(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["serve", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--host", "0.0.0.0"]
    )
    assert result.exit_code == 2
    assert "loopback" in result.output
