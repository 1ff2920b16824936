"""Hostile tenants, item 4: per-namespace quotas, over the whole server on SQLite and
PostgreSQL.

One write token must not be able to flood a shared cluster: each quota is refused at
its limit with the right status (422 when waiting will not help, 429 with Retry-After
when a window frees up) and the quota named in ``field``; a refusal changes nothing
stored; the other namespace is unaffected; raising the quota lets the write through;
two store handles racing at the limit never pass it; status, ``/v1/quota`` and
``/metrics`` show the use.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.cli.main import main
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import cron
from cronwheel.errors import QuotaExceededError
from tests.security.conftest import NS, OTHER, Sec

DAILY = cron("0 9 * * *")


def _refused(r: Any, status: int, field: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == "quota_exceeded" and error["field"] == field, error
    return error


def _enqueue(sec: Sec, who: str = "write") -> Any:
    body = {"task": "report", "allow_unknown_task": True}
    return sec.call("POST", "/v1/firings", who, json=body)


def test_jobs_quota(sec: Sec) -> None:
    sec.store.set_quota(NS, {"jobs": 2})
    sec.cron_job("a")
    sec.cron_job("b")
    before = sec.fingerprint()
    body = {
        "task": "report",
        "schedule": {"kind": "cron", "cron": "0 9 * * *"},
        "allow_unknown_task": True,
    }
    error = _refused(sec.call("POST", "/v1/jobs", json=body | {"name": "c"}), 422, "quota.jobs")
    assert "jobs" in error["message"]
    _refused(sec.call("PUT", "/v1/jobs/c", json=body), 422, "quota.jobs")
    assert sec.fingerprint() == before
    sec.cron_job("c", who="other-write")  # the other namespace has its own quota
    sec.store.set_quota(NS, {"jobs": 3})
    sec.cron_job("c")


def test_batches_count_against_the_quotas_as_single_writes_do(sec: Sec) -> None:
    """A batch is charged in its own transaction: over ``jobs`` or ``firings_per_minute``
    it is refused whole (nothing stored); a schedule denser than ``min_interval`` is
    its item's refusal."""
    sec.store.set_quota(NS, {"jobs": 2, "firings_per_minute": 3})
    sec.cron_job("a")
    before = sec.fingerprint()

    def job(name: str, **schedule: Any) -> dict[str, Any]:
        return {
            "name": name,
            "task": "report",
            "schedule": schedule or {"kind": "cron", "cron": "0 9 * * *"},
            "allow_unknown_task": True,
        }

    r = sec.call("POST", "/v1/jobs/batch", json={"items": [job("b"), job("c")]})
    _refused(r, 422, "quota.jobs")
    assert sec.fingerprint() == before
    fast = {"kind": "every", "interval": "1ms"}
    doc = sec.call("POST", "/v1/jobs/batch", json={"items": [job("flood", **fast), job("b")]})
    assert doc.status_code == 200, doc.text
    (flood, b) = doc.json()["items"]
    assert (flood["status"], flood["error"]["code"]) == (422, "quota_exceeded")
    assert flood["error"]["field"] == "items[0].schedule" and b["status"] == 201
    before = sec.fingerprint()
    runs = {"items": [{"task": "report", "allow_unknown_task": True}] * 4}
    r = sec.call("POST", "/v1/firings/batch", json=runs)
    _refused(r, 429, "quota.firings_per_minute")
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    assert sec.fingerprint() == before
    assert sec.call("POST", "/v1/firings/batch", "other-write", json=runs).status_code == 200
    runs["items"] = runs["items"][:3]
    assert sec.call("POST", "/v1/firings/batch", json=runs).json()["created"] == 3


def test_min_interval_quota(sec: Sec) -> None:
    sec.cron_job("daily")
    before = sec.fingerprint()
    fast = {"kind": "every", "interval": "1ms"}
    body = {"name": "flood", "task": "report", "schedule": fast, "allow_unknown_task": True}
    error = _refused(sec.call("POST", "/v1/jobs", json=body), 422, "schedule")
    assert "min_interval" in error["message"]
    patch = {"schedule": {"kind": "every", "interval": "50ms"}}
    _refused(sec.call("PATCH", "/v1/jobs/daily", json=patch), 422, "schedule")
    assert sec.fingerprint() == before
    # a cron of every second (the cron grammar's finest) is within the default 100 ms
    every_second = {"kind": "cron", "cron": "* * * * * *"}
    sec.cron_job("each-second", schedule=every_second)
    sec.cron_job("flood", who="other-write", schedule={"kind": "every", "interval": "2s"})
    sec.store.set_quota(NS, {"min_interval": "1ms"})
    sec.cron_job("flood", schedule=fast)


def test_firings_per_minute_quota(sec: Sec) -> None:
    sec.store.set_quota(NS, {"firings_per_minute": 2})
    for _ in range(2):
        assert _enqueue(sec).status_code == 201
    before = sec.fingerprint()
    r = _enqueue(sec)
    _refused(r, 429, "quota.firings_per_minute")
    retry = int(r.headers["Retry-After"])
    assert 1 <= retry <= 60
    assert sec.fingerprint() == before
    assert _enqueue(sec, "other-write").status_code == 201
    sec.advance(timedelta(seconds=retry))
    assert _enqueue(sec).status_code == 201
    sec.store.set_quota(NS, {"firings_per_minute": 10})
    assert _enqueue(sec).status_code == 201


def test_backfill_quotas(sec: Sec) -> None:
    sec.cron_job("hourly", schedule={"kind": "cron", "cron": "0 * * * *"})
    sec.store.set_quota(NS, {"backfill": 3, "backfill_per_day": 4})
    end = (sec.store.now() - timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)

    def backfill(hours: int, until: Any = end) -> Any:
        start = until - timedelta(hours=hours - 1)
        body = {"start": start.isoformat(), "end": until.isoformat()}
        return sec.call("POST", "/v1/jobs/hourly/backfill", json=body)

    before = sec.fingerprint()
    _refused(backfill(5), 422, "quota.backfill")
    assert sec.fingerprint() == before
    assert backfill(3).json()["inserted"] == 3
    before = sec.fingerprint()
    r = backfill(2, end - timedelta(hours=5))
    _refused(r, 429, "quota.backfill_per_day")
    assert int(r.headers["Retry-After"]) >= 1
    assert sec.fingerprint() == before
    sec.store.set_quota(NS, {"backfill_per_day": 10})
    assert backfill(2, end - timedelta(hours=5)).json()["inserted"] == 2


def test_running_quota_holds_the_rest_queued(sec: Sec) -> None:
    sec.store.set_quota(NS, {"running": 1})
    for _ in range(3):
        assert _enqueue(sec).status_code == 201
    assert _enqueue(sec, "other-write").status_code == 201
    claims = sec.store.claim("w", tasks=["report"], limit=10)
    assert sorted(c.firing.namespace for c in claims) == [NS, OTHER]
    assert sec.store.claim("w2", tasks=["report"], limit=10) == []
    queued = sec.store.list_firings(namespace=NS, states=[FiringState.QUEUED])
    assert len(queued) == 2
    sec.store.set_quota(NS, {"running": 3})
    assert len(sec.store.claim("w2", tasks=["report"], limit=10)) == 2


def test_two_handles_racing_never_pass_the_jobs_quota(sec: Sec) -> None:
    sec.store.set_quota(NS, {"jobs": 5})
    stores = [sec.store, sec.harness.open_another()]
    made: list[str] = []
    refused: list[str] = []
    start = threading.Barrier(len(stores))

    def create(k: int) -> None:
        start.wait()
        for i in range(5):
            spec = JobSpec(name=f"j{k}-{i}", task="report", schedule=DAILY, namespace=NS)
            try:
                stores[k].create_job(spec, first_fire_at=sec.store.now() + timedelta(hours=1))
                made.append(spec.name)
            except QuotaExceededError:
                refused.append(spec.name)

    threads = [threading.Thread(target=create, args=(k,)) for k in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 5 and len(refused) == 5
    assert len(sec.store.list_jobs(namespace=NS)) == 5


def test_status_quota_and_metrics_show_use(sec: Sec) -> None:
    sec.store.set_quota(NS, {"jobs": 1})
    sec.cron_job("a")
    body = {
        "name": "b",
        "task": "report",
        "schedule": {"kind": "cron", "cron": "0 9 * * *"},
        "allow_unknown_task": True,
    }
    _refused(sec.call("POST", "/v1/jobs", json=body), 422, "quota.jobs")
    status = sec.call("GET", "/v1/status", "read").json()
    assert status["quota"]["limits"]["jobs"] == 1 and status["quota"]["used"]["jobs"] == 1
    quota = sec.call("GET", "/v1/quota", "read").json()
    assert quota["namespace"] == NS and quota["custom"] is True
    other = sec.call("GET", "/v1/quota", "other-read").json()
    assert other["namespace"] == OTHER and other["custom"] is False
    text = sec.call("GET", "/metrics", "admin").text
    assert f'cronwheel_quota_limit{{namespace="{NS}",quota="jobs"}} 1.0' in text
    assert f'cronwheel_quota_used{{namespace="{NS}",quota="jobs"}} 1.0' in text
    assert f'cronwheel_quota_refusals_total{{namespace="{NS}",quota="jobs"}}' in text


def test_a_namespace_token_may_only_lower_its_quota(sec: Sec) -> None:
    before = sec.fingerprint()
    r = sec.call("PUT", "/v1/quota", "write", json={"jobs": 10})
    assert r.status_code == 403
    r = sec.call("PUT", "/v1/quota", "admin", json={"jobs": 10_000_000})
    assert r.status_code == 403 and r.json()["error"]["field"] == "jobs"
    r = sec.call("PUT", "/v1/quota", "admin", json={"jobs": -1})
    assert r.status_code == 422 and r.json()["error"]["field"] == "jobs"
    assert sec.fingerprint() == before
    r = sec.call("PUT", "/v1/quota", "admin", json={"jobs": 10, "min_interval": "1m"})
    assert r.status_code == 200, r.text
    assert r.json()["limits"]["jobs"] == 10 and r.json()["limits"]["min_interval"] == "1m"
    assert sec.store.get_quota(OTHER).jobs != 10


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--jobs", "-1"], "jobs"),
        (["--jobs", "many"], "--jobs"),
        (["--min-interval", "soon"], "min_interval"),
        (["--running", "2000000000"], "running"),
        ([], "at least one quota"),
    ],
)
def test_cli_quota_set_refuses_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], names: str
) -> None:
    store = f"sqlite:///{tmp_path}/q.db"
    code, out, err = _cli(["quota", "set", NS, *args, "--store", store], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and names in err, err
    code, out, _ = _cli(["quota", "show", NS, "--json", "--store", store], capsys)
    assert code == 0 and json.loads(out)["custom"] is False


def test_cli_quota_set_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = f"sqlite:///{tmp_path}/q.db"
    argv = ["quota", "set", NS, "--jobs", "7", "--min-interval", "30s", "--json"]
    code, out, err = _cli([*argv, "--store", store], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["custom"] and doc["limits"]["jobs"] == 7 and doc["limits"]["min_interval"] == "30s"
    code, out, _ = _cli(["quota", "show", NS, "--store", store], capsys)
    assert code == 0 and "0 / 7" in out
    code, out, _ = _cli(["status", "--json", "--store", store], capsys)
    assert code == 0
    (row,) = [q for q in json.loads(out)["quotas"] if q["namespace"] == NS]
    assert row["limits"]["jobs"] == 7


def test_two_handles_claiming_at_once_never_hold_past_the_running_quota(sec: Sec) -> None:
    sec.store.set_quota(NS, {"running": 5})
    for _ in range(20):
        assert _enqueue(sec).status_code == 201
    stores = [sec.store, sec.harness.open_another()]
    held: list[int] = []
    start = threading.Barrier(len(stores))

    def claim(k: int) -> None:
        start.wait()
        for _ in range(4):
            held.extend(c.firing.id for c in stores[k].claim(f"w{k}", tasks=["report"], limit=3))

    threads = [threading.Thread(target=claim, args=(k,)) for k in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(held) == len(set(held)) == 5
    held_states = [FiringState.CLAIMED, FiringState.RUNNING]
    assert len(sec.store.list_firings(namespace=NS, states=held_states)) == 5
    assert len(sec.store.list_firings(namespace=NS, states=[FiringState.QUEUED])) == 15
