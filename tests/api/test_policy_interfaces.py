"""One policy table, every interface: the CLI's ``jobs add`` flags, the API's
``policies`` fields, the dashboard's new-job form and the README's table are exactly
the rows of domain/policy_table.py, and a policy set through each is stored."""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.api.schemas import PoliciesIn
from cronwheel.app import App
from cronwheel.cli.jobs_add import add_command
from cronwheel.domain.jobs import build_policies
from cronwheel.domain.models import JobPolicies
from cronwheel.domain.overlap import OverlapPolicy
from cronwheel.domain.policies import MisfirePolicy
from cronwheel.domain.policy_table import POLICY_NAMES, markdown_table
from cronwheel.domain.schedules import every
from cronwheel.errors import ValidationError
from cronwheel.store.memory import MemoryStore
from cronwheel.store.sqlite import SqliteStore
from tests.api.conftest import Api
from tests.api.test_unknown_tasks import run

S = timedelta(seconds=1)
ROOT = Path(__file__).resolve().parents[2]

# One non-default value per policy: as typed on the CLI, as sent in JSON, as stored.
SAMPLES: dict[str, tuple[str, Any, Any]] = {
    "max_attempts": ("7", 7, 7),
    "retry_backoff": ("2s", "2s", 2 * S),
    "retry_backoff_max": ("5m", 300, 300 * S),
    "visibility_timeout": ("45", 45, 45 * S),
    "timeout": ("90s", "90s", 90 * S),
    "misfire": ("fire_all", "fire_all", MisfirePolicy.FIRE_ALL),
    "misfire_grace": ("2m", 120, 120 * S),
    "catchup_window": ("6h", "6h", 6 * 3600 * S),
    "max_catchup": ("12", 12, 12),
    "priority": ("2.5", 2.5, 2.5),
    "max_concurrency": ("3", 3, 3),
    "overlap": ("buffer_all", "buffer_all", OverlapPolicy.BUFFER_ALL),
    "max_buffer": ("9", 9, 9),
    "cancel_grace": ("40s", 40, 40 * S),
    "start_deadline": ("10m", "10m", 600 * S),
    "jitter": ("5", 5, 5 * S),
    "lateness_objective": ("1.5", 1.5, 1.5 * S),
    "keep_for": ("30d", "30d", 30 * 86400 * S),
    "keep_last": ("5", 5, 5),
}
RETRIES = ("4", 4, 5)  # stored as max_attempts = retries + 1

# A value each policy refuses: as typed on the CLI, as sent in JSON.
BAD: dict[str, tuple[str, Any]] = {
    "retries": ("-1", -1),
    "max_attempts": ("0", 0),
    "retry_backoff": ("soon", "soon"),
    "retry_backoff_max": ("0", 0),
    "visibility_timeout": ("0.5", 0.5),
    "timeout": ("-3", -3),
    "misfire": ("sometimes", "sometimes"),
    "misfire_grace": ("1x", "1x"),
    "catchup_window": ("0", 0),
    "max_catchup": ("10001", 10001),
    "priority": ("0", 0),
    "max_concurrency": ("many", 0),
    "overlap": ("queue", "queue"),
    "max_buffer": ("1.5", 1.5),
    "cancel_grace": ("0", 0),
    "start_deadline": ("never", "never"),
    "jitter": ("2d", "2d"),
    "lateness_objective": ("0", 0),
    "keep_for": ("40000d", "40000d"),
    "keep_last": ("1001", 1001),
}

# the flags of `jobs add` that are not policies
CLI_OTHERS = {
    "name", "task", "cron_expr", "tz", "dst_gap", "dst_overlap", "calendar", "every_text",
    "anchor",
    "at_text", "allow_past", "now_flag", "args_json", "kwargs_json", "start_at_text",
    "end_at_text", "max_runs", "paused", "replace", "allow_unknown_task", "namespace",
    "store_url", "url",
}  # fmt: skip


def test_the_table_is_every_policy_the_python_api_takes() -> None:
    assert set(POLICY_NAMES) == {f.name for f in fields(JobPolicies)} | {"retries"}
    assert set(SAMPLES) | {"retries"} == set(POLICY_NAMES) == set(BAD)
    policies = build_policies(**{k: v[1] for k, v in SAMPLES.items()})
    for name, (_, _, stored) in SAMPLES.items():
        assert getattr(policies, name) == stored, name
    with pytest.raises(ValidationError) as err:
        build_policies(retry_delay=3)
    assert err.value.field == "retry_delay"


def test_python_policies_round_trip() -> None:
    app = App("memory://")
    app.use_store(MemoryStore())
    job = app.schedule("t", every("1m"), name="j", **{k: v[1] for k, v in SAMPLES.items()})
    stored = app.store.get_job("default", job.name).spec.policies
    for name, (_, _, value) in SAMPLES.items():
        assert getattr(stored, name) == value, name
    assert app.schedule("t", every("1m"), name="k", retries=4).spec.policies.max_attempts == 5
    for name, (_, bad) in BAD.items():
        with pytest.raises(ValidationError) as err:
            app.schedule("t", every("1m"), name="bad", **{name: bad})
        assert err.value.field == name, name
    assert [j.name for j in app.store.list_jobs()] == ["j", "k"]


def test_the_cli_flags_are_the_table() -> None:
    names = {p.name for p in add_command.params}
    assert names - CLI_OTHERS == set(POLICY_NAMES)
    flags = {opt for p in add_command.params for opt in p.opts}
    # the public flag names of before the table
    for flag in ("--retries", "--timeout", "--visibility-timeout", "--misfire", "--priority"):
        assert flag in flags


def test_the_api_fields_are_the_table() -> None:
    assert set(PoliciesIn.model_fields) == set(POLICY_NAMES)


def test_the_readme_table_is_the_table() -> None:
    assert markdown_table() in (ROOT / "README.md").read_text(encoding="utf-8")


# -- the CLI ----------------------------------------------------------------------------------
def _stored(path: Path, name: str) -> JobPolicies:
    store = SqliteStore(str(path))
    try:
        return store.get_job("default", name).spec.policies
    finally:
        store.close()


def test_cli_policies_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    flags = [x for name, s in SAMPLES.items() for x in ("--" + name.replace("_", "-"), s[0])]
    code, _, err = run(["jobs", "add", "j", "--task", "t", "--every", "1m", "--store", url, *flags],
                       capsys)  # fmt: skip
    assert code == 0, err
    policies = _stored(tmp_path / "p.db", "j")
    for name, (_, _, stored) in SAMPLES.items():
        assert getattr(policies, name) == stored, name
    code, _, err = run(
        ["jobs", "add", "k", "--task", "t", "--every", "1m", "--store", url, "--retries", "4"],
        capsys,
    )
    assert code == 0, err
    assert _stored(tmp_path / "p.db", "k").max_attempts == RETRIES[2]


@pytest.mark.parametrize("name", sorted(BAD))
def test_cli_refuses_a_bad_policy_naming_it(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    flag = "--" + name.replace("_", "-")
    argv = ["jobs", "add", "j", "--task", "t", "--every", "1m", "--store", url, flag, BAD[name][0]]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"cronwheel: error: {name}:"), err
    code, out, _ = run(["jobs", "list", "--json", "--store", url], capsys)
    assert code == 0 and out.strip() == "[]"


# -- the HTTP API -----------------------------------------------------------------------------
BODY = {"task": "t", "schedule": {"kind": "every", "interval": 60}}


def test_api_policies_round_trip(api: Api) -> None:
    policies = {k: v[1] for k, v in SAMPLES.items()}
    r = api.call("POST", "/v1/jobs", json=BODY | {"name": "j", "policies": policies})
    assert r.status_code == 201, r.text
    stored = api.store.get_job("team-a", "j").spec.policies
    for name, (_, _, value) in SAMPLES.items():
        assert getattr(stored, name) == value, name
    r = api.call("POST", "/v1/jobs", json=BODY | {"name": "k", "policies": {"retries": 4}})
    assert r.status_code == 201 and r.json()["policies"]["max_attempts"] == RETRIES[2]
    r = api.call("PATCH", "/v1/jobs/k", json={"policies": {"misfire_grace": "3m"}})
    assert r.status_code == 200 and r.json()["policies"]["misfire_grace"] == 180


@pytest.mark.parametrize("name", sorted(BAD))
def test_api_refuses_a_bad_policy_naming_it(name: str, api: Api) -> None:
    before = api.counts()
    r = api.call("POST", "/v1/jobs", json=BODY | {"name": "j", "policies": {name: BAD[name][1]}})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == f"policies.{name}"
    assert api.counts() == before


# -- the dashboard's new-job form -------------------------------------------------------------
FORM = {"name": "j", "task": "t", "kind": "every", "schedule": "5m"}


def test_the_dashboard_form_fields_are_the_table(open_api: Api) -> None:
    html = open_api.client.get("/ui/jobs/new").text
    names = re.findall(r'name="([a-z_]+)" data-policy', html)
    assert sorted(names) == sorted(POLICY_NAMES)


def test_dashboard_form_policies_round_trip(open_api: Api) -> None:
    form = FORM | {k: v[0] for k, v in SAMPLES.items()}
    r = open_api.client.post("/ui/jobs/new", json=form)
    assert r.status_code == 201, r.text
    assert r.json()["url"] == f"/ui/jobs/{r.json()['id']}"
    stored = open_api.store.get_job("default", "j").spec.policies
    for name, (_, _, value) in SAMPLES.items():
        assert getattr(stored, name) == value, name
    r = open_api.client.post("/ui/jobs/new", json=FORM | {"name": "k", "retries": RETRIES[0]})
    assert r.status_code == 201, r.text
    assert open_api.store.get_job("default", "k").spec.policies.max_attempts == RETRIES[2]
    page = open_api.client.get(r.json()["url"])
    assert page.status_code == 200 and "k" in page.text


@pytest.mark.parametrize("name", sorted(BAD))
def test_dashboard_form_refuses_a_bad_policy_naming_it(name: str, open_api: Api) -> None:
    before = open_api.counts()
    r = open_api.client.post("/ui/jobs/new", json=FORM | {name: BAD[name][0]})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == name
    assert open_api.counts() == before


@pytest.mark.parametrize(
    ("form", "field"),
    [
        (FORM | {"surprise": "1"}, "surprise"),
        (FORM | {"kind": "sometimes"}, "kind"),
        (FORM | {"schedule": ""}, "schedule"),
        (FORM | {"schedule": "5 parsecs"}, "interval"),
        (FORM | {"task": "bad task"}, "task"),
        (FORM | {"name": ""}, "name"),
    ],
)
def test_dashboard_form_refuses_bad_fields(open_api: Api, form: dict[str, str], field: str) -> None:
    before = open_api.counts()
    r = open_api.client.post("/ui/jobs/new", json=form)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field
    assert open_api.counts() == before


def test_dashboard_form_checks_the_task_and_the_role(api: Api) -> None:
    from tests.api.test_unknown_tasks import register_worker

    register_worker(api.store, "backup")
    r = api.call("POST", "/ui/jobs/new", json=FORM)
    assert r.status_code == 422 and r.json()["error"]["field"] == "task"
    assert "known tasks: backup" in r.json()["error"]["message"]
    r = api.call("POST", "/ui/jobs/new", json=FORM | {"allow_unknown_task": "on"})
    assert r.status_code == 201, r.text
    assert api.store.get_job("team-a", "j").spec.task == "t"
    r = api.call("POST", "/ui/jobs/new", "read", json=FORM | {"name": "k", "task": "backup"})
    assert r.status_code == 403
    r = api.call("POST", "/ui/jobs/new", json=FORM | {"task": "backup"})
    assert r.status_code == 409 and r.json()["error"]["field"] == "name"
    r = api.call(
        "POST",
        "/ui/jobs/new",
        json=FORM | {"name": "x", "task": "backup"},
        headers={"Origin": "https://evil.example"},
    )
    assert r.status_code == 403 and r.json()["error"]["field"] == "Origin"


def test_dashboard_form_needs_a_login(api: Api) -> None:
    r = api.client.get("/ui/jobs/new", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    r = api.client.post("/ui/jobs/new", json=FORM)
    assert r.status_code == 401 and api.counts()[0] == 0


def test_a_table_row_must_be_complete() -> None:
    from cronwheel.domain.policy_table import Policy

    with pytest.raises(TypeError):
        Policy(name="x", kind="int", help="no bounds")
    with pytest.raises(TypeError):
        Policy(name="x", kind="choice", help="no choices")
    with pytest.raises(TypeError):
        Policy(name="x", kind="duration", help="bounds", low=1, high=2)
    assert Policy(name="x", kind="number", help="ok", low=0, high=1).flag == "--x"
