"""Issue 15, item 3: a hostile web page cannot use a visitor's browser against the server.

- DNS rebinding: a Host the server is not bound to is refused (421, field ``Host``) on
  every route, reads included, with auth off (the issue's case) and on.
- Cross-site state changes: every state-changing route of the API and the dashboard
  (taken from the app's own routes, so a new one cannot escape) refuses a foreign
  ``Origin`` or a ``Sec-Fetch-Site`` of ``cross-site``/``same-site`` (403 naming the
  header), with a body or without; same-origin browsers and clients that send no
  ``Origin`` (curl, ``cronwheel.Client``) keep working.
- The dashboard's cookie session: every POST needs the session's CSRF token (missing,
  forged or another session's: 403); the cookie is ``HttpOnly; SameSite=Strict`` and
  ``Secure`` over https, directly or as a trusted proxy says, never because an
  untrusted peer says so.

Every refusal leaves every stored row as it was (``sec.fingerprint()``).
"""

from __future__ import annotations

import re
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts

from cronwheel.cli.main import main
from cronwheel.errors import ValidationError
from cronwheel.web.browser import LOOPBACK_NAMES, allowed_hosts_for
from tests.security.conftest import BOUND, NS, Sec

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient asks for httpx2
    from starlette.testclient import TestClient

SECURE_ORIGIN = BOUND.replace("http:", "https:")
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")
REBOUND = ("rebind.attacker.example", "rebind.attacker.example:8080", "127.0.0.1.nip.io:8080")
CROSS_SITE: list[dict[str, str]] = [
    {"Origin": "https://evil.example"},
    {"Origin": "null"},  # sandboxed frames, file: pages
    {"Origin": "http://127.0.0.1:3000"},  # another port of this host: same site, not origin
    {"Origin": "http://localhost:8080"},  # another name of this server is another origin
    {"Origin": SECURE_ORIGIN},  # the scheme differs (no trusted proxy said https)
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Sec-Fetch-Site": "cross-site", "Origin": BOUND},
]
TOKEN_IN_PAGE = re.compile(r"""hx-headers='\{"X-CSRF-Token": "([0-9a-f]{64})"\}'""")


def routes(sec: Sec) -> list[tuple[str, str]]:
    """Every (method, path template) the app serves, the static files' mount as one GET."""
    out: list[tuple[str, str]] = []
    for route in iter_route_contexts(sec.client.app.routes):
        assert route.path is not None
        if route.methods:
            out += [(m, route.path) for m in sorted(route.methods)]
        else:
            out.append(("GET", route.path + "/htmx.min.js"))
    return out


def world(sec: Sec, who: str | None) -> dict[str, str]:
    """A job and a queued firing to aim at; the path parameters that name them."""
    job = sec.cron_job("nightly", who=who or "write")
    r = sec.call("POST", "/v1/jobs/nightly/trigger", who)
    assert r.status_code == 201, r.text
    return {"name": "nightly", "job_id": str(job["id"]), "firing_id": str(r.json()["id"])}


def concrete(template: str, params: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: params.get(m.group(1), "1"), template)


def assert_refused(r: Any, status: int, field: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/json"
    if r.request.method == "HEAD":
        return
    error = r.json()["error"]
    assert error["field"] == field and error["message"], error


# -- DNS rebinding: the Host check ---------------------------------------------------------------
def test_rebound_host_is_refused_on_every_route_without_auth(open_sec: Sec) -> None:
    rebound_host_is_refused_on_every_route(open_sec, None)


def test_rebound_host_is_refused_on_every_route_with_auth(bound_sec: Sec) -> None:
    rebound_host_is_refused_on_every_route(bound_sec, "admin")


def rebound_host_is_refused_on_every_route(sec: Sec, who: str | None) -> None:
    params = world(sec, who)
    served = routes(sec)
    assert {("DELETE", "/v1/jobs/{name}"), ("GET", "/v1/jobs"), ("GET", "/")} <= set(served)
    for method, template in served:
        before = sec.fingerprint()
        for host in REBOUND:
            r = sec.call(method, concrete(template, params), who, headers={"Host": host})
            assert_refused(r, 421, "Host")
            assert method == "HEAD" or r.json()["error"]["code"] == "misdirected_request"
        assert sec.fingerprint() == before, (method, template)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost:8080", "LocalHost:1", "[::1]:8080"])
def test_the_names_of_the_bound_address_are_answered(open_sec: Sec, host: str) -> None:
    r = open_sec.call("POST", "/v1/jobs", None, headers={"Host": host}, json=JOB)
    assert r.status_code == 201, r.text
    assert open_sec.call("GET", "/v1/jobs/fresh", None, headers={"Host": host}).status_code == 200


def test_allowed_hosts_follow_the_bind_address() -> None:
    assert allowed_hosts_for("127.0.0.1") == LOOPBACK_NAMES
    assert allowed_hosts_for("::1") == allowed_hosts_for("localhost") == LOOPBACK_NAMES
    assert allowed_hosts_for("127.0.0.2") == LOOPBACK_NAMES | {"127.0.0.2"}
    assert allowed_hosts_for("10.0.0.5") == {"10.0.0.5"}
    assert allowed_hosts_for("10.0.0.5", ["Cron.Example.COM."]) == {"10.0.0.5", "cron.example.com"}
    assert allowed_hosts_for("0.0.0.0") is None  # every address: any Host (tokens needed)
    assert allowed_hosts_for("::", ["a.example, b.example"]) == LOOPBACK_NAMES | {
        "a.example",
        "b.example",
    }
    for bad in ("cron.example.com:8443", "http://x", "*", "a..b", "-a.example"):
        with pytest.raises(ValidationError) as info:
            allowed_hosts_for("127.0.0.1", [bad])
        assert info.value.field == "allowed_host"


# -- cross-site state changes --------------------------------------------------------------------
def test_cross_site_state_changes_are_refused_on_every_route_without_auth(open_sec: Sec) -> None:
    cross_site_state_changes_are_refused_on_every_route(open_sec, None)


def test_cross_site_state_changes_are_refused_on_every_route_with_auth(bound_sec: Sec) -> None:
    cross_site_state_changes_are_refused_on_every_route(bound_sec, "admin")


def cross_site_state_changes_are_refused_on_every_route(sec: Sec, who: str | None) -> None:
    params = world(sec, who)
    changing = [(m, t) for m, t in routes(sec) if m in UNSAFE]
    assert {("POST", "/v1/jobs/{name}/trigger"), ("POST", "/ui/logout")} <= set(changing)
    bodies: list[dict[str, Any]] = [
        {},  # bodyless, as a cross-site form or fetch can send
        {"json": {"name": "x"}},
        {"content": b"name=x", "headers": {"Content-Type": "text/plain"}},  # no preflight
    ]
    for method, template in changing:
        path = concrete(template, params)
        before = sec.fingerprint()
        for hostile in CROSS_SITE:
            field = "Sec-Fetch-Site" if "Sec-Fetch-Site" in hostile else "Origin"
            for body in bodies:
                headers = hostile | body.get("headers", {})
                kw = {k: v for k, v in body.items() if k != "headers"}
                r = sec.call(method, path, who, headers=headers, **kw)
                assert_refused(r, 403, field)
        assert sec.fingerprint() == before, (method, template)


def test_same_origin_browsers_and_clients_without_origin_change_things_without_auth(
    open_sec: Sec,
) -> None:
    same_origin_browsers_and_clients_without_origin_change_things(open_sec, None)


def test_same_origin_browsers_and_clients_without_origin_change_things_with_auth(
    bound_sec: Sec,
) -> None:
    same_origin_browsers_and_clients_without_origin_change_things(bound_sec, "write")


def same_origin_browsers_and_clients_without_origin_change_things(
    sec: Sec, who: str | None
) -> None:
    world(sec, who)
    friendly: list[dict[str, str]] = [
        {},  # curl, cronwheel.Client
        {"Origin": BOUND, "Sec-Fetch-Site": "same-origin"},
        {"Origin": BOUND},  # a browser without Fetch Metadata
        {"Sec-Fetch-Site": "none"},  # typed by the user
    ]
    for headers in friendly:
        sec.advance(timedelta(seconds=1))  # a trigger per instant
        before = sec.fingerprint()
        r = sec.call("POST", "/v1/jobs/nightly/trigger", who, headers=headers)
        assert r.status_code == 201, (headers, r.text)
        fid = r.json()["id"]
        assert sec.call("POST", "/v1/jobs/nightly/pause", who, headers=headers).status_code == 200
        assert sec.call("POST", "/v1/jobs/nightly/resume", who, headers=headers).status_code == 200
        r = sec.call("POST", f"/v1/firings/{fid}/cancel", who, headers=headers)
        assert r.status_code == 200 and r.json()["result"] == "cancelled", r.text
        assert sec.fingerprint() != before
    r = sec.call("DELETE", "/v1/jobs/nightly", who, headers=friendly[1])
    assert r.status_code == 204, r.text
    # reads stay readable whatever the page (the browser keeps a cross-site page from
    # reading the answer: no CORS header is ever sent)
    r = sec.call("GET", "/v1/jobs", who, headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


# -- the dashboard's cookie session: CSRF ----------------------------------------------------------
def login(client: TestClient, token: str) -> None:
    same = {"Origin": str(client.base_url).rstrip("/"), "Sec-Fetch-Site": "same-origin"}
    r = client.post("/ui/login", json={"token": token}, headers=same)
    assert r.status_code == 200, r.text


def page_token(client: TestClient, path: str = "/") -> str:
    r = client.get(path)
    assert r.status_code == 200, r.text
    match = TOKEN_IN_PAGE.search(r.text)
    assert match is not None, r.text[:500]
    return match.group(1)


def test_every_dashboard_post_of_a_cookie_session_needs_its_csrf_token(bound_sec: Sec) -> None:
    sec = bound_sec
    job_id = world(sec, "write")["job_id"]
    second = TestClient(sec.client.app, base_url=BOUND)
    login(sec.client, sec.tokens["write"])
    login(second, sec.tokens["admin"])
    mine, theirs = page_token(sec.client), page_token(second)
    assert mine != theirs
    assert page_token(sec.client, f"/ui/jobs/{job_id}") == mine
    new_page = sec.client.get("/ui/jobs/new").text
    assert f'<input type="hidden" name="csrf_token" value="{mine}">' in new_page
    posts = [t for m, t in routes(sec) if m == "POST" and t.startswith("/ui/") and t != "/ui/login"]
    assert {"/ui/logout", "/ui/jobs/new", "/ui/jobs/{job_id}/skip-next"} <= set(posts)
    page = {"Origin": BOUND, "Sec-Fetch-Site": "same-origin", "HX-Request": "true"}
    wrong = [{}, {"X-CSRF-Token": ""}, {"X-CSRF-Token": "0" * 64}, {"X-CSRF-Token": theirs}]
    for template in posts:
        path = concrete(template, {"job_id": job_id})
        before = sec.fingerprint()
        for headers in wrong:
            r = sec.call("POST", path, None, headers=page | headers, json=NEW_JOB)
            assert_refused(r, 403, "X-CSRF-Token")
            assert "set-cookie" not in r.headers  # logout refused: the session stays
        assert sec.fingerprint() == before, template
    assert page_token(sec.client) == mine  # still logged in

    with_token = page | {"X-CSRF-Token": mine}
    r = sec.call("POST", f"/ui/jobs/{job_id}/skip-next", None, headers=with_token)
    assert r.status_code == 204, r.text
    skipped = sec.call("GET", "/v1/firings?state=skipped", "write").json()["items"]
    assert [f["reason"] for f in skipped] == ["skipped by write: from the dashboard"]
    r = sec.call("POST", "/ui/jobs/new", None, headers=with_token, json=NEW_JOB)
    assert r.status_code == 201, r.text
    assert sec.call("GET", "/v1/jobs/from-form", "read").json()["namespace"] == NS
    r = sec.call("POST", "/ui/logout", None, headers=with_token)
    assert r.status_code == 204 and "max-age=0" in r.headers["set-cookie"].lower()
    assert sec.client.get("/", follow_redirects=False).status_code == 303  # logged out
    # the other session, unaffected, still works with its own token
    r = second.post("/ui/logout", headers=page | {"X-CSRF-Token": theirs})
    assert r.status_code == 204


def test_a_bearer_request_needs_no_csrf_token_and_no_session_has_none(bound_sec: Sec) -> None:
    sec = bound_sec
    r = sec.call("POST", "/ui/jobs/new", "write", json=NEW_JOB)  # a header no page can forge
    assert r.status_code == 201, r.text
    r = sec.call("GET", "/", "read")
    assert r.status_code == 200 and "X-CSRF-Token" not in r.text


def test_the_login_form_is_refused_cross_site(bound_sec: Sec) -> None:
    before = bound_sec.fingerprint()
    for hostile in CROSS_SITE:
        r = bound_sec.call(
            "POST", "/ui/login", None, headers=hostile, json={"token": bound_sec.tokens["write"]}
        )
        assert r.status_code == 403 and "set-cookie" not in r.headers, r.text
    assert bound_sec.fingerprint() == before


# -- the cookie's flags --------------------------------------------------------------------------
def session_cookie(client: TestClient, headers: dict[str, str], token: str) -> str:
    r = client.post("/ui/login", json={"token": token}, headers=headers)
    assert r.status_code == 200, r.text
    cookie: str = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    return cookie


def test_the_cookie_is_secure_over_https_directly_or_by_a_trusted_proxy_only(
    bound_sec: Sec,
) -> None:
    app, token = bound_sec.client.app, bound_sec.tokens["read"]
    plain = session_cookie(bound_sec.client, {"Origin": BOUND}, token)
    assert "Secure" not in plain
    tls = TestClient(app, base_url=SECURE_ORIGIN)
    assert "Secure" in session_cookie(tls, {"Origin": SECURE_ORIGIN}, token)
    r = tls.post("/ui/logout", headers={"X-CSRF-Token": page_token(tls)})
    assert r.status_code == 204 and "Secure" in r.headers["set-cookie"]

    proxy = TestClient(app, base_url=BOUND, client=("10.1.2.3", 40000))
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.7"}
    assert "Secure" in session_cookie(proxy, https | {"Origin": SECURE_ORIGIN}, token)
    assert "Secure" not in session_cookie(proxy, {"X-Forwarded-Proto": "http"}, token)

    stranger = TestClient(app, base_url=BOUND, client=("203.0.113.9", 40000))
    assert "Secure" not in session_cookie(stranger, https, token)
    # ... and its claim of https does not make an https Origin its own
    r = stranger.post("/ui/login", json={"token": token}, headers=https | {"Origin": SECURE_ORIGIN})
    assert_refused(r, 403, "Origin")
    assert "--trusted-proxy" in r.json()["error"]["message"]


# -- the command line -----------------------------------------------------------------------------
def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``cronwheel api``'s uvicorn configuration, instead of serving it."""
    import uvicorn

    configs: list[Any] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: configs.append(self.config))
    return configs


def test_api_command_checks_host_against_its_bind_and_allowed_hosts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    served: list[Any],
) -> None:
    store = f"sqlite:///{tmp_path}/b.db"
    monkeypatch.setenv("CRONWHEEL_ALLOWED_HOSTS", "env-one.example,env-two.example")
    args = ["api", "--store", store, "--allowed-host", "cron.example.com"]
    code, err = run([*args, "--trusted-proxy", "10.0.0.1"], capsys)
    assert code == 0, err
    (config,) = served
    assert config.proxy_headers is False  # only the app's --trusted-proxy peers count
    client = TestClient(config.app, base_url="http://cron.example.com")
    for host in ("cron.example.com", "localhost:8080", "127.0.0.1"):
        assert client.get("/healthz", headers={"Host": host}).status_code == 200
    for host in ("env-one.example", "evil.example"):  # the flag replaces the variable
        assert client.get("/healthz", headers={"Host": host}).status_code == 421

    monkeypatch.delenv("CRONWHEEL_ALLOWED_HOSTS")
    code, err = run(["api", "--store", store, "--auth", "--host", "0.0.0.0"], capsys)
    assert code == 0 and "--allowed-host" in err, err
    client = TestClient(served[-1].app, base_url="http://203.0.113.4:8080")
    assert client.get("/healthz").status_code == 200  # any Host: tokens guard it

    monkeypatch.setenv("CRONWHEEL_ALLOWED_HOSTS", "env-one.example env-two.example")
    code, err = run(["api", "--store", store, "--auth", "--host", "0.0.0.0"], capsys)
    assert code == 0, err
    client = TestClient(served[-1].app, base_url="http://env-two.example")
    assert client.get("/healthz").status_code == 200
    assert client.get("/healthz", headers={"Host": "10.9.9.9"}).status_code == 421


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--allowed-host", "cron.example.com:443"),
        ("--allowed-host", "https://cron.example.com"),
        ("--trusted-proxy", "proxy.example"),
        ("--trusted-proxy", "10.0.0.0/33"),
    ],
)
def test_api_command_refuses_a_bad_host_or_proxy_in_one_line(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], served: list[Any]
) -> None:
    code, err = run(["api", "--store", f"sqlite:///{tmp_path}/c.db", flag, value], capsys)
    assert code == 2 and err.count("\n") == 1 and flag in err, err
    assert served == []


JOB = {
    "name": "fresh",
    "task": "report",
    "schedule": {"kind": "every", "interval": "5m"},
    "allow_unknown_task": True,
}
NEW_JOB = {
    "name": "from-form",
    "task": "report",
    "kind": "every",
    "schedule": "5m",
    "allow_unknown_task": "on",
}


def test_serve_hands_the_hosts_and_proxies_to_its_api_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import cronwheel.node

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(cronwheel.node, "serve", lambda *a, **kw: calls.append(kw) or 0)
    argv = ["serve", "--store", f"sqlite:///{tmp_path}/s.db", "--allowed-host", "Cron.Example"]
    code, err = run([*argv, "--trusted-proxy", "10.0.0.1"], capsys)
    assert code == 0, err
    (kw,) = calls
    assert kw["api_args"] == ["--allowed-host", "cron.example", "--trusted-proxy", "10.0.0.1/32"]
    code, err = run([*argv, "--trusted-proxy", "somewhere"], capsys)
    assert code == 2 and "--trusted-proxy" in err and err.count("\n") == 1, err
