"""Issue 15, item 5: no cross-namespace leaks.

A namespace's token sees its namespace only, on every route of the API and the
dashboard and in ``/metrics``; cluster-wide views need a cluster token; the ids it
sees tell nothing about other namespaces' activity; a 403 says ``forbidden`` and
names the role missing. Every test runs on SQLite and on PostgreSQL (``sec``).
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from cronwheel.cli.main import main
from cronwheel.domain.ids import MAX_ID, Kind
from cronwheel.domain.models import NodeInfo
from cronwheel.errors import ValidationError
from cronwheel.web.ids import ids_for
from cronwheel.web.tokens import CLUSTER, issue_token
from tests.security.conftest import NS, OTHER, Sec

SECRET = "zq-secret-payroll-7"  # a name only team-a has: grep every team-b answer for it
OTHERS = ("other-read", "other-write", "other-admin")
HTMX = {"HX-Request": "true"}


def _cluster_token(sec: Sec, role: str = "read") -> str:
    return issue_token(sec.store, namespace=CLUSTER, role=role, label="ops")[1]


def _plant(sec: Sec) -> dict[str, Any]:
    """team-a's job SECRET with a queued and a cancelled firing, team-b's own job and
    firing, a live worker and scheduler; /metrics scraped once before the cancel so
    the cumulative series count it."""
    job = sec.cron_job(SECRET, args=[SECRET], kwargs={"why": SECRET})
    sec.cron_job("b-own", who="other-write")
    first = sec.call("POST", f"/v1/jobs/{SECRET}/trigger").json()
    sec.advance(timedelta(seconds=1))
    second = sec.call("POST", f"/v1/jobs/{SECRET}/trigger").json()
    own = sec.call("POST", "/v1/jobs/b-own/trigger", "other-write").json()
    for node_id, kind in (("w-a", "worker"), ("s-a", "scheduler")):
        now = sec.store.now()
        sec.store.register_node(
            NodeInfo(
                id=node_id,
                kind=kind,
                hostname="host-1",
                pid=1,
                started_at=now,
                heartbeat_at=now,
                info={"tasks": ["report"]} if kind == "worker" else {},
            )
        )
    cluster = _cluster_token(sec)
    assert sec.client.get("/metrics", headers=_bearer(cluster)).status_code == 200
    r = sec.call("POST", f"/v1/firings/{first['id']}/cancel")
    assert r.json()["result"] == "cancelled"
    return {"job": job, "firing": second, "cancelled": first, "own": own, "cluster": cluster}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _tells_of_team_a(text: str, planted: dict[str, Any]) -> list[str]:
    """What of team-a's a text shows: its namespace, its job name, its ids."""
    found = [w for w in (NS, SECRET) if w in text]
    ids = {planted["job"]["id"], planted["firing"]["id"], planted["cancelled"]["id"]}
    found += [str(i) for i in ids if re.search(rf"(?<!\d){i}(?!\d)", text)]
    return found


def _leaves(routes: list[Any], prefix: str) -> list[Any]:
    """Every route, those of included routers too (FastAPI >= 0.165 keeps an included
    router as one entry of ``app.routes``); included with a prefix, a route is only
    checked to have none (this app's routers carry theirs)."""
    out: list[Any] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            assert not route.include_context.prefix, route.include_context.prefix
            out += _leaves(list(inner.routes), prefix)
        else:
            out.append(route)
    return out


def _routes(app: Any) -> list[tuple[str, str]]:
    """(method, path template) of every route of the app. A route with a path
    parameter this test does not know fails it."""
    out: list[tuple[str, str]] = []
    for route in _leaves(app.routes, ""):
        if isinstance(route, Mount):
            assert route.path == "/ui/static", f"a mount this test does not know: {route.path}"
            continue
        assert isinstance(route, APIRoute | Route), route
        unknown = set(re.findall(r"{(\w+)(?::\w+)?}", route.path)) - {"name", "job_id", "firing_id"}
        assert not unknown, f"{route.path}: teach this test the parameter(s) {unknown}"
        out += [(m, route.path) for m in sorted(route.methods or ()) if m != "HEAD"]
    return out


def _fill(template: str, values: dict[str, str]) -> str:
    return re.sub(r"{(\w+)(?::\w+)?}", lambda m: values[m.group(1)], template)


def test_other_namespaces_tokens_never_see_team_a(sec: Sec) -> None:
    """Every route, every token of team-b: an answer tells nothing of team-a. A route
    naming team-a's job or firing answers exactly as for one that does not exist
    (the identifiers the caller sent, echoed, aside)."""
    planted = _plant(sec)
    real = {
        "name": SECRET,
        "job_id": str(planted["job"]["id"]),
        "firing_id": str(planted["firing"]["id"]),
    }
    ids = ids_for(sec.store)

    def absent(kind: Kind, like: str) -> str:
        """A shown id of no object, as many digits long as ``like``."""
        shown = (str(ids.encode(kind, n)) for n in itertools.count(10**9))
        return next(x for x in shown if len(x) == len(like))

    ghost = {  # the same lengths as the real ones (Content-Length is compared too)
        "name": "zq-ghost0-payroll-7",
        "job_id": absent("job", real["job_id"]),
        "firing_id": absent("firing", real["firing_id"]),
    }
    routes = _routes(sec.client.app)
    assert ("GET", "/metrics") in routes and ("GET", "/") in routes
    assert ("GET", "/v1/firings/{firing_id}") in routes
    routes.sort(key=lambda mr: mr[0] == "DELETE")  # last: the GETs still find team-b's job
    for who in OTHERS:
        for method, template in routes:
            kw: dict[str, Any] = {"headers": HTMX}
            if method in ("POST", "PUT", "PATCH"):
                kw["json"] = {}
            r = sec.call(method, _fill(template, real), who, **kw)
            assert r.status_code < 500, (who, method, template, r.text)
            text = r.text + json.dumps(sorted(r.headers.items()))
            if "{" in template:
                for key, value in real.items():
                    text = text.replace(value, ghost[key])
                g = sec.call(method, _fill(template, ghost), who, **kw)
                assert (r.status_code, text) == (
                    g.status_code,
                    g.text + json.dumps(sorted(g.headers.items())),
                ), (who, method, template)
            told = _tells_of_team_a(text, planted)
            assert not told, (who, method, template, r.status_code, told)
            if template.startswith("/v1/") and r.status_code == 403:
                assert r.json()["error"]["code"] == "forbidden"
    # the same routes with team-b's own lists filled show team-b's data
    text = sec.call("GET", "/v1/firings", "other-read").text
    assert str(planted["own"]["id"]) in text and not _tells_of_team_a(text, planted)


def test_a_namespace_admin_reads_only_its_namespace_metrics(sec: Sec) -> None:
    planted = _plant(sec)
    r = sec.call("GET", "/metrics", "other-admin")
    assert r.status_code == 200
    assert not _tells_of_team_a(r.text, planted)
    assert f'cronwheel_namespace_firings{{namespace="{OTHER}",state="queued"}} 1.0' in r.text
    assert 'cronwheel_queue_depth{state="queued"} 1.0' in r.text  # team-b's one, not 2
    assert "cronwheel_jobs 1.0" in r.text and "cronwheel_store_up 1.0" in r.text
    assert f'cronwheel_job_backlog{{job="b-own",namespace="{OTHER}"}} 1.0' in r.text
    for cluster_only in (
        "cronwheel_nodes",
        "cronwheel_node_heartbeat_age_seconds",
        "cronwheel_node_is_leader",
        "cronwheel_leader_epoch",
        "cronwheel_leader_up",
        "cronwheel_stuck_claims",
        "cronwheel_metrics_untracked_firings",
        "cronwheel_metrics_scan_truncated",
        "w-a",
        "host-1",
    ):
        assert cluster_only not in r.text, cluster_only
    mine = sec.call("GET", "/metrics", "admin").text
    assert f'cronwheel_firings_finished_total{{namespace="{NS}",outcome="cancelled"}} 1.0' in mine
    assert f'job="{SECRET}"' in mine and OTHER not in mine and "b-own" not in mine


def test_cluster_tokens_see_every_namespace_and_no_job(sec: Sec) -> None:
    planted = _plant(sec)
    cluster = _bearer(planted["cluster"])
    text = sec.client.get("/metrics", headers=cluster).text
    assert f'namespace="{NS}"' in text and f'namespace="{OTHER}"' in text
    assert SECRET in text and 'cronwheel_nodes{kind="worker",state="alive"} 1.0' in text
    status = sec.client.get("/v1/status", headers=cluster).json()
    assert status["cluster"] is True and status["queue_depth"] == 2
    assert {n["id"] for n in status["nodes"]} == {"w-a", "s-a"}
    page = sec.client.get("/", headers=cluster).text
    assert "every namespace" in page and "w-a" in page and SECRET not in page
    overview = sec.client.get("/ui/f/overview", headers=cluster).text
    assert '<span id="queued">2</span>' in overview and "leader" in overview
    # a namespace's token: its own counts, no leader, no nodes
    own = sec.call("GET", "/v1/status", "other-read").json()
    assert own["cluster"] is False and own["queue_depth"] == 1
    assert (own["nodes"], own["leader"], own["workers"], own["schedulers"]) == (
        None,
        None,
        None,
        None,
    )
    own_overview = sec.call("GET", "/ui/f/overview", "other-read").text
    assert '<span id="queued">1</span>' in own_overview and "epoch" not in own_overview
    assert "w-a" not in sec.call("GET", "/ui/f/nodes", "other-read").text
    # a cluster token reads no namespace's jobs or firings, and changes none
    before = sec.fingerprint()
    for method, path in (
        ("GET", "/v1/jobs"),
        ("GET", f"/v1/firings/{planted['firing']['id']}"),
        ("POST", f"/v1/jobs/{SECRET}/pause"),
    ):
        r = sec.client.request(method, path, headers=_bearer(_cluster_token(sec, "admin")))
        assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden"), path
        assert "namespace token" in r.json()["error"]["message"]
    r = sec.client.post(
        "/ui/jobs/new", headers=cluster | HTMX, json={"name": "x", "task": "t", "kind": "now"}
    )
    assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
    after = sec.fingerprint()
    after["api_tokens"] = before["api_tokens"]  # the admin cluster tokens issued above
    assert after == before


def test_a_cluster_token_has_no_write_role(sec: Sec) -> None:
    with pytest.raises(ValidationError, match="role read or admin"):
        issue_token(sec.store, namespace=CLUSTER, role="write")


def test_ids_between_two_own_creations_tell_nothing_of_a_burst(sec: Sec) -> None:
    def enqueue(who: str) -> dict[str, Any]:
        r = sec.call("POST", "/v1/firings", who, json={"task": "report"})
        assert r.status_code == 201, r.text
        doc: dict[str, Any] = r.json()
        return doc

    first = enqueue("write")
    burst = [enqueue("other-write") for _ in range(100)]
    second = enqueue("write")
    ids = ids_for(sec.store)
    a, b = ids.decode("firing", first["id"]), ids.decode("firing", second["id"])
    assert a is not None and b is not None and b - a == 101  # the store's own order
    # the ids shown: no difference, ratio or order that counts the burst
    shown = [first["id"], *(f["id"] for f in burst), second["id"]]
    assert abs(second["id"] - first["id"]) not in range(1, 10_000)
    assert len(set(shown)) == len(shown) and all(1 <= i <= MAX_ID for i in shown)
    assert shown != sorted(shown) and shown != sorted(shown, reverse=True)
    assert sum(1 for x, y in itertools.pairwise(shown) if abs(x - y) < 2**30) < 5
    # the job ids too (every enqueue makes a job), and the firing's idempotency key
    assert abs(second["job_id"] - first["job_id"]) not in range(1, 10_000)
    assert second["idempotency_key"].startswith(f"{second['job_id']}:")
    # a cursor holds the shown id, not the store's
    for _ in range(2):
        enqueue("write")
    page = sec.call("GET", "/v1/firings", "read", params={"limit": 1}).json()
    raw = page["next_cursor"]
    position = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))["p"]
    assert position == page["items"][0]["id"] and ids.decode("firing", position) != position
    rest = sec.call("GET", "/v1/firings", "read", params={"cursor": raw, "limit": 10}).json()
    assert [f["id"] for f in rest["items"]] == [
        x["id"] for x in sec.call("GET", "/v1/firings", "read").json()["items"][1:]
    ]


def test_every_surface_shows_the_same_id(sec: Sec, tmp_path: Path) -> None:
    job = sec.cron_job(SECRET)
    firing = sec.call("POST", f"/v1/jobs/{SECRET}/trigger").json()
    fid, jid = firing["id"], job["id"]
    assert firing["job_id"] == jid
    assert sec.call("GET", f"/v1/firings/{fid}", "read").json()["id"] == fid
    listed = sec.call("GET", f"/v1/jobs/{SECRET}/firings", "read").json()["items"]
    assert [f["id"] for f in listed] == [fid]
    page = sec.call("GET", "/", "read").text
    assert f'href="/ui/firings/{fid}"' in page and f'href="/ui/jobs/{jid}"' in page
    job_page = sec.call("GET", f"/ui/jobs/{jid}", "read")
    assert job_page.status_code == 200 and f"job {jid}" in job_page.text
    assert f"Firing {fid}" in sec.call("GET", f"/ui/firings/{fid}", "read").text
    other = sec.harness.open_another()
    internal = ids_for(sec.store).decode("firing", fid) or 0
    assert ids_for(other).encode("firing", internal) == fid  # another handle, the same id
    if sec.kind == "sqlite":  # the CLI on the same store file
        store = f"sqlite:///{tmp_path}/contract.db"
        for argv, expect in (
            (["firings", "show", str(fid), "--json"], f'"id": {fid}'),
            (["firings", "list", "--namespace", NS, "--json"], f'"id": {fid}'),
            (["jobs", "list", "--namespace", NS, "--json"], f'"id": {jid}'),
        ):
            out = _cli([*argv, "--store", store])
            assert expect in out, (argv, out)


def _cli(argv: list[str]) -> str:
    import contextlib
    import io

    out = io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code
    assert not code, (argv, code)
    return out.getvalue()


def test_refusals_say_forbidden_and_name_the_role(sec: Sec) -> None:
    sec.cron_job()
    before = sec.fingerprint()
    r = sec.call("POST", "/v1/jobs/nightly/pause", "read")
    err = r.json()["error"]
    assert (r.status_code, err["code"]) == (403, "forbidden")
    assert "write role" in err["message"] and "read" in err["message"]
    r = sec.call("GET", "/metrics", "write")
    err = r.json()["error"]
    assert (r.status_code, err["code"]) == (403, "forbidden") and "admin role" in err["message"]
    job_id = sec.call("GET", "/v1/jobs/nightly", "read").json()["id"]
    r = sec.call("POST", f"/ui/jobs/{job_id}/skip-next", "read", headers=HTMX)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
    assert "write role" in r.json()["error"]["message"]
    # 401 stays unauthorized: no token, a bad token
    for headers in ({}, {"Authorization": "Bearer cw_1_" + "x" * 43}):
        for path in ("/v1/jobs", "/metrics"):
            r = sec.client.get(path, headers=headers)
            assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized"), path
    # another namespace's object: 404, as one that does not exist
    r = sec.call("GET", "/v1/jobs/nightly", "other-admin")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
    assert sec.call("GET", f"/ui/jobs/{job_id}", "other-admin").status_code == 404
    assert sec.fingerprint() == before


def test_cli_issues_a_cluster_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = f"sqlite:///{tmp_path}/t.db"
    main(["tokens", "create", "--cluster", "--role", "read", "--store", store])
    out, err = capsys.readouterr()
    assert out.startswith("cw_") and "the cluster" in err
    listed = json.loads(_cli(["tokens", "list", "--json", "--store", store]))
    assert [(t["namespace"], t["role"]) for t in listed] == [(CLUSTER, "read")]
    for argv in (
        ["--cluster", "--namespace", "a", "--role", "read"],
        ["--role", "read"],
        ["--cluster", "--role", "write"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(["tokens", "create", *argv, "--store", store])
        _, err = capsys.readouterr()
        assert exc.value.code == 2 and err.count("\n") == 1, (argv, err)
        assert "namespace" in err or "role" in err
