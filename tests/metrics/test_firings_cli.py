"""``cronwheel firings show`` lists every attempt; ``firings list`` filters by CLAIMED and
the scheduled range; ``cronwheel status`` counts claimed firings apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cronwheel.cli.main import cli, main
from cronwheel.domain.clock import FakeClock
from cronwheel.web.ids import ids_for

from .helpers import T0, claim_all, finish, make_store, queue


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'm.db'}"


def test_show_lists_attempts_and_the_first_attempts_lateness(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    store = make_store(tmp_path, clock)
    firing = queue(store, "flaky")
    for worker, late, ok in (("w1", 40.0, False), ("w2", 900.0, False), ("w3", 1500.0, True)):
        clock.advance(2)  # the retry (at the failed start) is due
        (claim,) = claim_all(store, worker=worker)
        finish(store, claim, late_ms=late, ok=ok, retry=not ok)
    fid = ids_for(store).encode("firing", firing.id)  # the id the CLI shows and takes
    store.close()
    run = CliRunner().invoke(cli, ["firings", "show", str(fid), "--store", _url(tmp_path)])
    assert run.exit_code == 0, run.output
    assert "3 attempt(s)" in run.output
    lines = [line for line in run.output.splitlines() if line.strip().startswith("│ ")]
    cells = [[c.strip() for c in line.strip("│ ").split("│")] for line in lines]
    rows = [r for r in cells if r[0].isdigit()]  # an attempt's first line (cells wrap)
    assert [(r[0], r[1], r[5]) for r in rows] == [
        ("1", "w1", "failed"),
        ("2", "w2", "failed"),
        ("3", "w3", "succeeded"),
    ]
    run = CliRunner().invoke(
        cli, ["firings", "show", str(fid), "--json", "--store", _url(tmp_path)]
    )
    doc = json.loads(run.output)
    assert [a["outcome"] for a in doc["attempts"]] == ["failed", "failed", "succeeded"]
    assert doc["lateness_ms"] == 40.0  # the first attempt's, not the last one's 1500
    run = CliRunner().invoke(cli, ["firings", "list", "--json", "--store", _url(tmp_path)])
    (listed,) = json.loads(run.output)
    assert (listed["attempt"], listed["lateness_ms"]) == (3, 40.0)
    text = CliRunner().invoke(cli, ["firings", "list", "--store", _url(tmp_path)]).output
    assert "40.0 ms" in text and "1500.0 ms" not in text


def test_list_filters_claimed_and_bad_instants_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_store(tmp_path)
    a, b, c = (queue(store, name) for name in ("a", "b", "c"))
    store.claim("w1", tasks=["t"], limit=2, start=1)
    shown = sorted(ids_for(store).encode("firing", f.id) for f in (a, b, c))  # the CLI's ids
    store.close()
    url = _url(tmp_path)
    run = CliRunner().invoke(
        cli, ["firings", "list", "--state", "claimed", "--json", "--store", url]
    )
    held = json.loads(run.output)
    assert [(f["state"], f["worker_id"]) for f in held] == [("claimed", "w1")]
    assert held[0]["claimed_at"] is not None and held[0]["started_at"] is None
    run = CliRunner().invoke(
        cli,
        ["firings", "list", "--scheduled-to", "2000-01-01T00:00:00Z", "--json", "--store", url],
    )
    assert json.loads(run.output) == []
    run = CliRunner().invoke(
        cli,
        ["firings", "list", "--scheduled-from", "2026-03-01T12:00:00Z", "--json", "--store", url],
    )
    assert sorted(f["id"] for f in json.loads(run.output)) == shown
    with pytest.raises(SystemExit) as exit_:
        main(["firings", "list", "--scheduled-from", "noon", "--store", url])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.count("\n") == 1 and err.startswith("cronwheel: error: --scheduled-from: ")


def test_status_counts_claimed_apart_from_the_queue(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    for name in ("a", "b", "c", "d"):
        queue(store, name)
    store.claim("w1", tasks=["t"], limit=3, start=1)
    store.close()
    run = CliRunner().invoke(cli, ["status", "--json", "--store", _url(tmp_path)])
    doc = json.loads(run.output)
    assert (doc["queue_depth"], doc["claimed"], doc["running"]) == (1, 2, 1)
    assert "claimed" not in doc["last_hour"]
    text = CliRunner().invoke(cli, ["status", "--store", _url(tmp_path)]).output
    assert "queue depth 1 (queued)   claimed 2   running 1" in text


def test_jobs_explain_tells_a_held_firing(tmp_path: Path) -> None:
    from cronwheel.domain.models import JobSpec
    from cronwheel.domain.schedules import every

    clock = FakeClock(T0)
    store = make_store(tmp_path, clock)
    spec = JobSpec(name="tick", task="t", schedule=every("1m"))
    job = store.create_job(spec, first_fire_at=T0)
    (fid,) = [f.id for f in store.add_firings("default", "tick", [T0], note="n").inserted]
    clock.advance(1)
    (held,) = store.claim("w1", tasks=["t"], limit=1, start=0)
    assert held.firing.id == fid and job.id == held.firing.job_id
    shown = ids_for(store).encode("firing", fid)  # the id the CLI shows
    store.close()
    args = ["jobs", "explain", "tick", "--since", "2026-03-01T12:00:00Z"]
    args += ["--until", "2026-03-01T12:00:30Z", "--json", "--store", _url(tmp_path)]
    run = CliRunner().invoke(cli, args)
    (occurrence,) = json.loads(run.output)
    assert occurrence["firing_id"] == shown and occurrence["fate"] == "fired"
    assert occurrence["detail"].endswith("held by a worker, not started yet")
