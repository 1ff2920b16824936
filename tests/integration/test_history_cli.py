"""``cronwheel history prune|retention``: dry run by default, --apply deletes; a bad
value is one line on stderr, exit 2, and changes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronwheel.cli.main import main
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.schedules import now
from cronwheel.store.protocol import Completion
from cronwheel.store.sqlite import SqliteStore
from tests.contract.conftest import spec


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _old_history(path: Path) -> None:
    """Three immediate jobs run 8 days before the real now (the CLI's clock)."""
    clock = FakeClock(datetime.now(UTC) - timedelta(days=8))
    store = SqliteStore(str(path), clock=clock)
    store.migrate()
    for i in range(3):
        store.enqueue_now(spec(f"once-{i}", schedule=now()))
    for claim in store.claim("w", tasks=["t"], limit=10):
        at = clock.now()
        store.complete(
            [
                Completion(
                    firing_id=claim.firing.id,
                    claim_token=claim.claim_token,
                    succeeded=True,
                    started_at=at,
                    finished_at=at,
                )
            ]
        )
    store.close()


def test_prune_is_a_dry_run_until_applied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "h.db"
    _old_history(path)
    url = f"sqlite:///{path}"
    code, out, _ = run(["history", "prune", "--store", url], capsys)
    assert code == 0 and "would delete: 3 finished firings (3 succeeded)" in out
    assert "dry run" in out
    code, out, _ = run(["history", "prune", "--store", url, "--json"], capsys)
    assert json.loads(out)["firings_total"] == 3  # still there
    code, out, _ = run(["history", "prune", "--apply", "--store", url, "--json"], capsys)
    doc = json.loads(out)
    assert (doc["dry_run"], doc["firings_total"], doc["jobs"]) == (False, 3, 3)
    code, out, _ = run(["history", "prune", "--store", url, "--json"], capsys)
    assert json.loads(out)["firings_total"] == 0


def test_retention_show_set_reset_and_bad_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/r.db"
    code, out, _ = run(["history", "retention", "team", "--store", url], capsys)
    assert code == 0 and "(the default)" in out and "7 days" in out
    code, out, _ = run(
        ["history", "retention", "team", "--keep-for", "30d", "--keep-last", "3", "--store", url],
        capsys,
    )
    assert code == 0 and "(its own)" in out and "30 days" in out and "last 3" in out
    for flag, value, field in (
        ("--keep-for", "soon", "keep_for"),
        ("--keep-last", "-1", "keep_last"),
        ("--keep-last", "5000", "keep_last"),
    ):
        code, out, err = run(["history", "retention", "team", flag, value, "--store", url], capsys)
        assert code == 2 and field in err and len(err.strip().splitlines()) == 1
    code, out, _ = run(["history", "retention", "team", "--json", "--store", url], capsys)
    assert json.loads(out) == {
        "namespace": "team",
        "custom": True,
        "keep_for_s": 30 * 86400.0,
        "keep_last": 3,
    }
    code, out, _ = run(["history", "retention", "team", "--reset", "--store", url], capsys)
    assert code == 0 and "(the default)" in out
