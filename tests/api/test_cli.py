"""``cronwheel tokens``, ``cronwheel api`` start-up rules, and the remote mode of
``cronwheel jobs`` / ``firings`` (``--url`` + CRONWHEEL_TOKEN) against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cronwheel.cli.main import main
from cronwheel.web.ids import ids_for
from tests.api.conftest import Server


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_tokens_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = f"sqlite:///{tmp_path}/t.db"
    code, out, err = run(
        [
            "tokens",
            "create",
            "--namespace",
            "team-a",
            "--role",
            "read",
            "--name",
            "ci",
            "--store",
            store,
        ],
        capsys,
    )
    assert code == 0 and out.startswith("cw_1_") and "not shown again" in err
    secret = out.strip()
    code, out, _ = run(["tokens", "list", "--json", "--store", store], capsys)
    rows = json.loads(out)
    assert [(r["id"], r["namespace"], r["role"], r["name"]) for r in rows] == [
        (1, "team-a", "read", "ci")
    ]
    assert secret not in out and secret.split("_", 2)[2] not in out
    code, out, _ = run(["tokens", "revoke", "1", "--store", store], capsys)
    assert code == 0 and "revoked token 1" in out
    code, out, _ = run(["tokens", "list", "--json", "--store", store], capsys)
    assert json.loads(out)[0]["revoked_at"] is not None
    code, _, err = run(["tokens", "revoke", "7", "--store", store], capsys)
    assert code == 2 and err.count("\n") == 1 and "no token with id 7" in err
    code, _, err = run(
        ["tokens", "create", "--namespace", "Bad NS", "--role", "read", "--store", store], capsys
    )
    assert code == 2 and "namespace" in err


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com"])
def test_api_refuses_public_hosts_without_auth(
    host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in ([], ["--no-auth"]):
        code, _, err = run(
            ["api", "--host", host, "--store", f"sqlite:///{tmp_path}/a.db", *extra], capsys
        )
        assert code == 2 and "--auth" in err and err.count("\n") == 1


def test_loopback_detection() -> None:
    from cronwheel.cli.api_cmd import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.1.2.3", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "myhost"))


def test_remote_jobs_and_firings(
    server: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONWHEEL_URL", server.url)
    monkeypatch.setenv("CRONWHEEL_TOKEN", server.write)
    code, out, err = run(
        ["jobs", "add", "n1", "--task", "t", "--every", "5m", "--retries", "2"], capsys
    )
    assert code == 0, err
    assert "created job 'n1'" in out
    code, out, _ = run(
        ["jobs", "add", "n1", "--task", "t", "--every", "5m", "--retries", "2", "--replace"], capsys
    )
    assert "unchanged job 'n1'" in out
    code, out, _ = run(["jobs", "list", "--json"], capsys)
    (doc,) = json.loads(out)
    assert (doc["name"], doc["namespace"], doc["policies"]["max_attempts"]) == ("n1", "team-a", 3)
    code, out, _ = run(["jobs", "show", "n1", "--json"], capsys)
    assert json.loads(out)["upcoming"]
    assert run(["jobs", "pause", "n1"], capsys)[0] == 0
    assert server.store.get_job("team-a", "n1").paused
    assert run(["jobs", "resume", "n1"], capsys)[0] == 0
    firing = server.store.add_firings("team-a", "n1", [server.store.now()], note="t").inserted[0]
    fid = ids_for(server.store).encode("firing", firing.id)  # the id the API shows
    code, out, _ = run(["firings", "list", "--job", "n1", "--json"], capsys)
    assert [f["id"] for f in json.loads(out)] == [fid]
    (held,) = server.store.claim("w-9", tasks=["t"], limit=1, start=0)
    assert held.firing.id == firing.id and not held.started
    code, out, _ = run(["firings", "show", str(fid), "--json"], capsys)
    shown = json.loads(out)
    assert (shown["state"], shown["worker_id"]) == ("claimed", "w-9")
    assert [(a["attempt"], a["outcome"]) for a in shown["attempts"]] == [(1, "claimed")]
    code, out, _ = run(["firings", "show", str(fid)], capsys)
    assert "1 attempt(s)" in out and "claimed" in out
    code, out, _ = run(["firings", "cancel", str(fid)], capsys)
    assert out.startswith("cancelled")
    code, _, err = run(["firings", "retry", str(fid)], capsys)
    assert code == 2 and "dead" in err
    code, out, _ = run(["firings", "list", "--json"], capsys)  # the namespace's firings
    assert [f["id"] for f in json.loads(out)] == [fid]
    code, _, err = run(["jobs", "show", "ghost"], capsys)
    assert (code, err) == (2, "cronwheel: error: name: no job named 'ghost'\n")
    code, _, err = run(["jobs", "list", "--namespace", "other"], capsys)
    assert code == 2 and "--namespace" in err
    assert run(["jobs", "delete", "n1"], capsys)[0] == 0
    monkeypatch.setenv("CRONWHEEL_TOKEN", server.read)
    code, _, err = run(["jobs", "add", "n2", "--task", "t", "--now"], capsys)
    assert code == 2 and "needs the write role" in err and server.read not in err
    monkeypatch.delenv("CRONWHEEL_TOKEN")
    code, _, err = run(["jobs", "list"], capsys)
    assert code == 2 and "Authorization" in err


def test_local_mode_still_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRONWHEEL_URL", raising=False)
    store = f"sqlite:///{tmp_path}/local.db"
    code, out, err = run(
        ["jobs", "add", "l1", "--task", "t", "--every", "1m", "--store", store], capsys
    )
    assert code == 0, err
    code, out, _ = run(["jobs", "list", "--json", "--store", store], capsys)
    assert [j["name"] for j in json.loads(out)] == ["l1"]


def test_bench_api_needs_wrk_and_other_workloads_keep_their_duration_floor(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    code, out, err = run(["bench", "api", "--smoke"], capsys)
    assert code == 2 and "wrk" in err and len(err.strip().splitlines()) == 1 and not out
    code, _, err = run(["bench", "cron-mix", "--duration", "2"], capsys)
    assert code == 2 and "--duration" in err and "at least 5 seconds" in err


def test_bench_soak_runs_must_be_a_positive_count(capsys: pytest.CaptureFixture[str]) -> None:
    # refused before any store is made or loaded: one line naming the option
    code, out, err = run(["bench", "soak", "--runs", "0"], capsys)
    assert code == 2 and "--runs" in err and len(err.strip().splitlines()) == 1 and not out


def test_api_workers_must_be_a_positive_count(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["api", "--workers", "0"], capsys)
    assert code == 2 and "--workers" in err


def test_a_serving_processs_app_is_frozen_out_of_the_cyclic_gc(tmp_path: Path) -> None:
    """`cronwheel api`'s app: what the process holds once it is built is not walked by
    every full collection (api_cmd._app)."""
    import gc

    from cronwheel.cli.api_cmd import _app
    from cronwheel.store.sqlite import SqliteStore

    store = SqliteStore(str(tmp_path / "gc.db"))
    store.migrate()
    settings = {
        "auth_required": True,
        "max_body": 1 << 16,
        "allowed_hosts": None,
        "trusted_proxies": (),
        "store_calls_on_loop": True,
    }
    gc.unfreeze()
    try:
        app = _app(store, settings)
        assert gc.get_freeze_count() > 0
        assert not any(o is app for o in gc.get_objects())  # frozen: no generation walks it
    finally:
        gc.unfreeze()
        store.close()
