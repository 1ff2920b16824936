"""A job whose task no worker has ever served is refused, the same way through the
Python API, the HTTP API and the CLI, once any worker registered with the store; an
explicit flag allows it. Before any worker registered, every task is accepted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.app import App
from cronwheel.cli.main import main
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import NodeInfo
from cronwheel.domain.schedules import every
from cronwheel.errors import ValidationError
from cronwheel.store.memory import MemoryStore
from cronwheel.store.protocol import Store
from cronwheel.store.sqlite import SqliteStore
from tests.api.conftest import Api, Server

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def register_worker(store: Store, *tasks: str, node_id: str = "w1") -> None:
    now = store.now()
    store.register_node(
        NodeInfo(
            id=node_id,
            kind="worker",
            hostname="h",
            pid=1,
            started_at=now,
            heartbeat_at=now,
            info={"tasks": list(tasks)},
        )
    )


# -- Python API -----------------------------------------------------------------------------
@pytest.fixture
def app() -> Iterator[App]:
    app = App("memory://", clock=FakeClock(T0))
    app.use_store(MemoryStore(clock=app.clock))
    yield app
    app.close()


def test_app_accepts_any_task_before_a_worker_registered(app: App) -> None:
    assert app.schedule("anything", every("1m")).spec.task == "anything"
    assert app.enqueue("whatever").task == "whatever"


def test_app_refuses_a_task_no_worker_served(app: App) -> None:
    register_worker(app.store, "send_digest", "resize")
    with pytest.raises(ValidationError) as err:
        app.schedule("send_digets", every("1m"))
    assert err.value.field == "task"
    assert "'send_digets'" in err.value.message and "resize, send_digest" in err.value.message
    with pytest.raises(ValidationError) as err:
        app.enqueue("send_digets")
    assert err.value.field == "task"
    assert app.store.list_jobs() == []  # nothing stored
    assert app.schedule("send_digest", every("1m")).spec.task == "send_digest"
    job = app.schedule("later", every("1m"), allow_unknown_task=True)
    assert job.spec.task == "later"


def test_app_flag_allows_unknown_tasks_for_enqueue(app: App) -> None:
    register_worker(app.store, "a")
    app.allow_unknown_task = True
    assert app.enqueue("b").task == "b"
    with pytest.raises(ValidationError) as err:  # a per-call False still checks
        app.schedule("b", every("1m"), allow_unknown_task=False)
    assert err.value.field == "task"


def test_app_refuses_a_malformed_task_name_as_such(app: App) -> None:
    register_worker(app.store, "a")
    with pytest.raises(ValidationError) as err:
        app.enqueue("bad name")
    assert err.value.field == "task" and "must be a task name" in err.value.message


def test_the_known_tasks_listed_are_bounded(app: App) -> None:
    register_worker(app.store, *(f"t{i:02}" for i in range(30)))
    with pytest.raises(ValidationError) as err:
        app.enqueue("nope")
    assert "t19" in err.value.message and "t20" not in err.value.message
    assert "and 10 more" in err.value.message


# -- HTTP API -------------------------------------------------------------------------------
BODY = {"name": "j", "task": "report", "schedule": {"kind": "every", "interval": 60}}


def test_api_refuses_a_task_no_worker_served(api: Api) -> None:
    register_worker(api.store, "backup", "resize")
    before = api.counts()
    r = api.call("POST", "/v1/jobs", json=BODY)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == "task" and "backup, resize" in error["message"]
    r = api.call("PUT", "/v1/jobs/j", json={k: v for k, v in BODY.items() if k != "name"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "task"
    assert api.counts() == before
    r = api.call("POST", "/v1/jobs", json=BODY | {"allow_unknown_task": True})
    assert r.status_code == 201, r.text
    # changing another field of a job whose task is still unserved is no error
    r = api.call("PATCH", "/v1/jobs/j", json={"paused": True})
    assert r.status_code == 200, r.text
    r = api.call("PATCH", "/v1/jobs/j", json={"task": "nope"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "task"
    r = api.call("PATCH", "/v1/jobs/j", json={"task": "backup"})
    assert r.status_code == 200 and r.json()["task"] == "backup"
    r = api.call("PUT", "/v1/jobs/j", json={"task": "nope2", "schedule": BODY["schedule"]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "task"
    body = {"task": "nope2", "schedule": BODY["schedule"], "allow_unknown_task": True}
    r = api.call("PUT", "/v1/jobs/j", json=body)
    assert r.status_code == 200 and r.json()["task"] == "nope2"


def test_api_accepts_any_task_before_a_worker_registered(api: Api) -> None:
    assert api.call("POST", "/v1/jobs", json=BODY).status_code == 201


def test_api_allow_unknown_task_must_be_a_boolean(api: Api) -> None:
    r = api.call("POST", "/v1/jobs", json=BODY | {"allow_unknown_task": "yes"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "allow_unknown_task"


# -- CLI ------------------------------------------------------------------------------------
def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _jobs(url: str) -> list[Any]:
    store = SqliteStore(url.removeprefix("sqlite:///"))
    try:
        return store.list_jobs()
    finally:
        store.close()


def test_cli_refuses_a_task_no_worker_served(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    add = ["jobs", "add", "j", "--every", "1m", "--store", url]
    assert run([*add, "--task", "first"], capsys)[0] == 0  # no worker yet: accepted
    store = SqliteStore(str(tmp_path / "cli.db"))
    register_worker(store, "backup")
    store.close()
    code, out, err = run([*add[:2], "k", *add[3:], "--task", "bakup"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("cronwheel: error: task:") and "known tasks: backup" in err
    assert [j.name for j in _jobs(url)] == ["j"]
    code, _, _ = run([*add[:2], "k", *add[3:], "--task", "bakup", "--allow-unknown-task"], capsys)
    assert code == 0 and {j.spec.task for j in _jobs(url)} == {"first", "bakup"}
    # --replace of a job that keeps its task is no error; moving it to another is checked
    assert run([*add, "--task", "first", "--replace", "--priority", "2"], capsys)[0] == 0
    code, _, err = run([*add, "--task", "other", "--replace"], capsys)
    assert code == 2 and "task" in err
    code, out, _ = run(["jobs", "list", "--json", "--store", url], capsys)
    assert sorted(j["task"] for j in json.loads(out)) == ["bakup", "first"]


def test_api_enqueue_refuses_a_task_no_worker_served(api: Api) -> None:
    register_worker(api.store, "resize")
    before = api.counts()
    r = api.call("POST", "/v1/firings", json={"task": "resise"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "task"
    assert "known tasks: resize" in r.json()["error"]["message"]
    assert api.counts() == before
    assert api.call("POST", "/v1/firings", json={"task": "resize"}).status_code == 201
    r = api.call("POST", "/v1/firings", json={"task": "resise", "allow_unknown_task": True})
    assert r.status_code == 201 and r.json()["task"] == "resise"


def test_remote_cli_refuses_a_task_no_worker_served(
    server: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONWHEEL_URL", server.url)
    monkeypatch.setenv("CRONWHEEL_TOKEN", server.write)
    register_worker(server.store, "backup")
    add = ["jobs", "add", "n1", "--task", "bakup", "--every", "5m", "--misfire-grace", "2m"]
    code, out, err = run(add, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "task" in err and "known tasks: backup" in err
    code, out, err = run([*add, "--allow-unknown-task"], capsys)
    assert code == 0, err
    job = server.store.get_job("team-a", "n1")
    assert job.spec.task == "bakup" and job.spec.policies.misfire_grace == timedelta(minutes=2)


def test_app_reads_the_served_tasks_once_per_served_task(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_worker(app.store, "a", "b")
    reads: list[int] = []
    served_tasks = app.store.served_tasks

    def counting(**kw: Any) -> Any:
        reads.append(1)
        return served_tasks(**kw)

    monkeypatch.setattr(app.store, "served_tasks", counting)
    for _ in range(3):
        app.enqueue("a")
        app.enqueue("b")
    assert len(reads) == 1  # a served task stays served: no read per enqueue
    with pytest.raises(ValidationError):
        app.enqueue("c")
    with pytest.raises(ValidationError):
        app.enqueue("c")
    assert len(reads) == 3  # an unknown one is looked up each time (a worker may come)
    register_worker(app.store, "c", node_id="w2")
    assert app.enqueue("c").task == "c"
