"""The hostile-input catalog: each row is answered 4xx in the error shape and
stores nothing (jobs, firings and idempotency keys are counted before and after)."""

from __future__ import annotations

import json

import pytest

from tests.api.conftest import Api

JSON = {"content-type": "application/json"}
EVERY = b'"schedule": {"kind": "every", "interval": 60}'


def job(extra: bytes = b"", name: bytes = b'"j"') -> bytes:
    return b'{"name": ' + name + b', "task": "t", ' + EVERY + extra + b"}"


# id, method, path, body, extra headers, status, code
CATALOG: list[tuple[str, str, str, bytes, dict[str, str], int, str]] = [
    # -- payload ------------------------------------------------------------------
    (
        "too-large-declared",
        "POST",
        "/v1/jobs",
        b"{}",
        JSON | {"content-length": "999999"},
        413,
        "payload_too_large",
    ),
    (
        "too-large-streamed",
        "POST",
        "/v1/jobs",
        b'{"name": "' + b"x" * 70_000 + b'"}',
        JSON,
        413,
        "payload_too_large",
    ),
    (
        "bad-content-length",
        "POST",
        "/v1/jobs",
        b"{}",
        JSON | {"content-length": "-1"},
        400,
        "invalid_input",
    ),
    ("no-content-type", "POST", "/v1/jobs", job(), {}, 415, "unsupported_media_type"),
    (
        "text-plain",
        "POST",
        "/v1/jobs",
        job(),
        {"content-type": "text/plain"},
        415,
        "unsupported_media_type",
    ),
    (
        "form",
        "POST",
        "/v1/jobs",
        b"name=j",
        {"content-type": "application/x-www-form-urlencoded"},
        415,
        "unsupported_media_type",
    ),
    (
        "latin1-charset",
        "POST",
        "/v1/jobs",
        job(),
        {"content-type": "application/json; charset=latin-1"},
        415,
        "unsupported_media_type",
    ),
    ("invalid-utf8", "POST", "/v1/jobs", job(name=b'"\xff\xfe"'), JSON, 400, "invalid_json"),
    ("overlong-utf8", "POST", "/v1/jobs", job(name=b'"\xc0\xaf"'), JSON, 400, "invalid_json"),
    ("malformed", "POST", "/v1/jobs", b'{"name": ', JSON, 400, "invalid_json"),
    ("trailing-garbage", "POST", "/v1/jobs", job() + b"x", JSON, 400, "invalid_json"),
    ("duplicate-key", "POST", "/v1/jobs", job(b', "name": "k"'), JSON, 400, "invalid_json"),
    (
        "duplicate-nested-key",
        "POST",
        "/v1/jobs",
        job(b', "kwargs": {"a": 1, "a": 2}'),
        JSON,
        400,
        "invalid_json",
    ),
    ("nan", "POST", "/v1/jobs", job(b', "args": [NaN]'), JSON, 400, "invalid_json"),
    ("infinity", "POST", "/v1/jobs", job(b', "args": [-Infinity]'), JSON, 400, "invalid_json"),
    ("float-overflow", "POST", "/v1/jobs", job(b', "args": [1e400]'), JSON, 400, "invalid_json"),
    (
        "huge-integer",
        "POST",
        "/v1/jobs",
        job(b', "args": [' + b"9" * 5000 + b"]"),
        JSON,
        400,
        "invalid_json",
    ),
    (
        "deep-nesting",
        "POST",
        "/v1/jobs",
        job(b', "args": ' + b"[" * 40 + b"]" * 40),
        JSON,
        400,
        "invalid_json",
    ),
    (
        "very-deep-nesting",
        "POST",
        "/v1/jobs",
        b"[" * 60_000 + b"]" * 60_000,
        JSON,
        413,
        "payload_too_large",
    ),
    (
        "deep-under-limit",
        "POST",
        "/v1/jobs",
        b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
        JSON,
        400,
        "invalid_json",
    ),
    ("lone-surrogate-name", "POST", "/v1/jobs", job(name=b'"\\ud800"'), JSON, 400, "invalid_json"),
    (
        "lone-surrogate-key",
        "POST",
        "/v1/jobs",
        job(b', "kwargs": {"\\udfff": 1}'),
        JSON,
        400,
        "invalid_json",
    ),
    ("nul-in-name", "POST", "/v1/jobs", job(name=b'"a\\u0000b"'), JSON, 422, "invalid_input"),
    ("nul-in-task", "POST", "/v1/firings", b'{"task": "t\\u0000"}', JSON, 422, "invalid_input"),
    ("crlf-in-name", "POST", "/v1/jobs", job(name=b'"a\\r\\nb"'), JSON, 422, "invalid_input"),
    ("array-top-level", "POST", "/v1/jobs", b"[]", JSON, 422, "invalid_input"),
    ("string-top-level", "POST", "/v1/jobs", b'"job"', JSON, 422, "invalid_input"),
    ("null-top-level", "POST", "/v1/jobs", b"null", JSON, 422, "invalid_input"),
    ("empty-body", "POST", "/v1/jobs", b"", JSON, 422, "invalid_input"),
    ("bom", "POST", "/v1/jobs", b"\xef\xbb\xbf" + job(), JSON, 400, "invalid_json"),
    # -- strict types -----------------------------------------------------------------
    (
        "string-for-int",
        "POST",
        "/v1/jobs",
        job(b', "policies": {"max_attempts": "3"}'),
        JSON,
        422,
        "invalid_input",
    ),
    (
        "bool-for-int",
        "POST",
        "/v1/jobs",
        job(b', "policies": {"max_catchup": true}'),
        JSON,
        422,
        "invalid_input",
    ),
    (
        "float-for-int",
        "POST",
        "/v1/jobs",
        job(b', "policies": {"max_attempts": 3.5}'),
        JSON,
        422,
        "invalid_input",
    ),
    ("unknown-field", "POST", "/v1/jobs", job(b', "owner": "me"'), JSON, 422, "invalid_input"),
    (
        "unknown-policy",
        "POST",
        "/v1/jobs",
        job(b', "policies": {"misfire": "later"}'),
        JSON,
        422,
        "invalid_input",
    ),
    (
        "absurd-priority",
        "POST",
        "/v1/jobs",
        job(b', "policies": {"priority": 1e308}'),
        JSON,
        422,
        "invalid_input",
    ),
    (
        "absurd-duration",
        "POST",
        "/v1/jobs",
        job(b', "policies": {"timeout": 1e300}'),
        JSON,
        422,
        "invalid_input",
    ),
    (
        "absurd-duration-text",
        "POST",
        "/v1/jobs",
        job(b', "policies": {"timeout": "999999999999w"}'),
        JSON,
        422,
        "invalid_input",
    ),
    (
        "negative-interval",
        "POST",
        "/v1/jobs",
        b'{"name": "j", "task": "t", "schedule": {"kind": "every", "interval": -1}}',
        JSON,
        422,
        "invalid_schedule",
    ),
    (
        "offset-beyond-24h",
        "POST",
        "/v1/jobs",
        b'{"name": "j", "task": "t", "schedule": '
        b'{"kind": "at", "at": "2030-01-01T00:00:00+25:00"}}',
        JSON,
        422,
        "invalid_schedule",
    ),
    (
        "naive-instant",
        "POST",
        "/v1/jobs",
        b'{"name": "j", "task": "t", "schedule": {"kind": "at", "at": "2030-01-01T00:00:00"}}',
        JSON,
        422,
        "invalid_schedule",
    ),
    (
        "year-10000",
        "POST",
        "/v1/schedules/preview",
        b'{"cron": "* * * * *", "after": "10000-01-01T00:00:00Z"}',
        JSON,
        422,
        "invalid_input",
    ),
    (
        "cron-control-chars",
        "POST",
        "/v1/jobs",
        b'{"name": "j", "task": "t", "schedule": {"kind": "cron", "cron": "* * *\\n * *"}}',
        JSON,
        422,
        "invalid_cron",
    ),
    (
        "cron-never-fires",
        "POST",
        "/v1/jobs",
        b'{"name": "j", "task": "t", "schedule": {"kind": "cron", "cron": "0 0 31 4 *"}}',
        JSON,
        422,
        "invalid_cron",
    ),
    (
        "zone-path",
        "POST",
        "/v1/jobs",
        b'{"name": "j", "task": "t", "schedule": {"kind": "cron", "cron": "* * * * *", '
        b'"tz": "../../etc/passwd"}}',
        JSON,
        422,
        "unknown_timezone",
    ),
    ("task-shell", "POST", "/v1/firings", b'{"task": "$(reboot)"}', JSON, 422, "invalid_input"),
    ("task-url", "POST", "/v1/firings", b'{"task": "http://evil/x"}', JSON, 422, "invalid_input"),
    # -- query parameters -------------------------------------------------------------
    ("negative-limit", "GET", "/v1/jobs?limit=-1", b"", {}, 400, "invalid_input"),
    ("zero-limit", "GET", "/v1/jobs?limit=0", b"", {}, 400, "invalid_input"),
    ("absurd-limit", "GET", "/v1/jobs?limit=100000000000000000000", b"", {}, 400, "invalid_input"),
    ("text-limit", "GET", "/v1/jobs?limit=ten", b"", {}, 400, "invalid_input"),
    ("unknown-state", "GET", "/v1/jobs?state=zombie", b"", {}, 400, "invalid_input"),
    (
        "tampered-cursor",
        "GET",
        "/v1/jobs?cursor=eyJucyI6InRlYW0tYSIsImsiOiJqb2JzIiwicCI6LTF9",
        b"",
        {},
        400,
        "invalid_cursor",
    ),
    ("cursor-not-base64", "GET", "/v1/jobs?cursor=%%%", b"", {}, 400, "invalid_cursor"),
    ("cursor-bad-json", "GET", "/v1/jobs?cursor=bm90IGpzb24", b"", {}, 400, "invalid_cursor"),
    (
        "cursor-float-position",
        "GET",
        "/v1/jobs?cursor=eyJucyI6InRlYW0tYSIsImsiOiJqb2JzIiwicCI6MS41fQ",
        b"",
        {},
        400,
        "invalid_cursor",
    ),
    ("firing-id-text", "GET", "/v1/firings/abc", b"", {}, 400, "invalid_input"),
    ("firing-id-zero", "GET", "/v1/firings/0", b"", {}, 400, "invalid_input"),
    ("firing-id-huge", "GET", "/v1/firings/99999999999999999999999", b"", {}, 400, "invalid_input"),
    ("token-in-query", "GET", "/v1/jobs?access_token=x", b"", {}, 400, "credentials_in_query"),
    # -- batches: what refuses the whole request (an item's own errors: BATCH_ITEMS) ---
    (
        "batch-too-large-streamed",
        "POST",
        "/v1/jobs/batch",
        b'{"items": [' + b",".join([job()] * 2000) + b"]}",
        JSON,
        413,
        "payload_too_large",
    ),
    (
        "batch-too-many-items",
        "POST",
        "/v1/firings/batch",
        b'{"items": [' + b",".join([b"{}"] * 1001) + b"]}",
        JSON,
        422,
        "invalid_input",
    ),
    ("batch-items-object", "POST", "/v1/jobs/batch", b'{"items": {}}', JSON, 422, "invalid_input"),
    (
        "batch-items-null",
        "POST",
        "/v1/firings/batch",
        b'{"items": null}',
        JSON,
        422,
        "invalid_input",
    ),
    ("batch-no-items", "POST", "/v1/jobs/batch", b"{}", JSON, 422, "invalid_input"),
    (
        "batch-unknown-field",
        "POST",
        "/v1/jobs/batch",
        b'{"items": [], "atomic": true}',
        JSON,
        422,
        "invalid_input",
    ),
    (
        "batch-mode-text",
        "POST",
        "/v1/jobs/batch",
        b'{"items": [], "all_or_nothing": "yes"}',
        JSON,
        422,
        "invalid_input",
    ),
    (
        "batch-item-duplicate-key",
        "POST",
        "/v1/jobs/batch",
        b'{"items": [' + job(b', "task": "u"') + b"]}",
        JSON,
        400,
        "invalid_json",
    ),
    (
        "batch-item-deep",
        "POST",
        "/v1/firings/batch",
        b'{"items": [{"task": "t", "args": ' + b"[" * 40 + b"]" * 40 + b"}]}",
        JSON,
        400,
        "invalid_json",
    ),
    (
        "batch-item-nan",
        "POST",
        "/v1/firings/batch",
        b'{"items": [{"task": "t", "args": [NaN]}]}',
        JSON,
        400,
        "invalid_json",
    ),
    (
        "batch-all-or-nothing-not-a-list",
        "POST",
        "/v1/firings/batch",
        b'{"items": "t", "all_or_nothing": true}',
        JSON,
        422,
        "invalid_input",
    ),
]

# A hostile item in a batch: its own error (status, code, field under items[1]), the
# items around it written; all or nothing, the batch refused and nothing stored.
BATCH_ITEMS: list[tuple[str, str, object, int, str, str]] = [
    ("item-null", "/v1/jobs/batch", None, 422, "invalid_input", "items[1]"),
    ("item-list", "/v1/jobs/batch", [], 422, "invalid_input", "items[1]"),
    ("item-text", "/v1/firings/batch", "run", 422, "invalid_input", "items[1]"),
    ("item-number", "/v1/firings/batch", 7, 422, "invalid_input", "items[1]"),
    (
        "item-unknown-field",
        "/v1/jobs/batch",
        {"name": "u", "task": "t", "schedule": {"kind": "now"}, "shell": "rm"},
        422,
        "invalid_input",
        "items[1].shell",
    ),
    (
        "item-name-dotdot",
        "/v1/jobs/batch",
        {"name": "a/../b", "task": "t", "schedule": {"kind": "now"}},
        422,
        "invalid_input",
        "items[1].name",
    ),
    (
        "item-name-nul",
        "/v1/jobs/batch",
        {"name": "a\u0000b", "task": "t", "schedule": {"kind": "now"}},
        422,
        "invalid_input",
        "items[1].name",
    ),
    (
        "item-name-too-long",
        "/v1/jobs/batch",
        {"name": "n" * 201, "task": "t", "schedule": {"kind": "now"}},
        422,
        "invalid_input",
        "items[1].name",
    ),
    (
        "item-cron-too-long",
        "/v1/jobs/batch",
        {"name": "c", "task": "t", "schedule": {"kind": "cron", "cron": "*" * 300}},
        422,
        "invalid_input",
        "items[1].schedule.cron",
    ),
    (
        "item-tz-path",
        "/v1/jobs/batch",
        {"name": "z", "task": "t", "schedule": {"kind": "cron", "cron": "* * * * *", "tz": "../x"}},
        422,
        "unknown_timezone",
        "items[1].schedule.tz",
    ),
    (
        "item-interval-zero",
        "/v1/jobs/batch",
        {"name": "e", "task": "t", "schedule": {"kind": "every", "interval": 0}},
        422,
        "invalid_schedule",
        "items[1].schedule.interval",
    ),
    (
        "item-name-as-number",
        "/v1/jobs/batch",
        {"name": 5, "task": "t", "schedule": {"kind": "now"}},
        422,
        "invalid_input",
        "items[1].name",
    ),
    (
        "item-task-shell",
        "/v1/firings/batch",
        {"task": "$(reboot)"},
        422,
        "invalid_input",
        "items[1].task",
    ),
    (
        "item-args-object",
        "/v1/firings/batch",
        {"task": "t", "args": {"a": 1}},
        422,
        "invalid_input",
        "items[1].args",
    ),
    (
        "item-kwargs-list",
        "/v1/firings/batch",
        {"task": "t", "kwargs": [1]},
        422,
        "invalid_input",
        "items[1].kwargs",
    ),
    (
        "item-key-number",
        "/v1/firings/batch",
        {"task": "t", "idempotency_key": 5},
        422,
        "invalid_input",
        "items[1].idempotency_key",
    ),
    (
        "item-key-control",
        "/v1/firings/batch",
        {"task": "t", "idempotency_key": "a\nb\u0000"},
        422,
        "invalid_input",
        "items[1].idempotency_key",
    ),
    (
        "item-key-empty",
        "/v1/firings/batch",
        {"task": "t", "idempotency_key": ""},
        422,
        "invalid_input",
        "items[1].idempotency_key",
    ),
    (
        "item-key-too-long",
        "/v1/firings/batch",
        {"task": "t", "idempotency_key": "k" * 256},
        422,
        "invalid_input",
        "items[1].idempotency_key",
    ),
    (
        "item-key-on-a-job",
        "/v1/jobs/batch",
        {"name": "k", "task": "t", "schedule": {"kind": "now"}, "idempotency_key": "k"},
        422,
        "invalid_input",
        "items[1].idempotency_key",
    ),
]


def _fine(path: str, i: int) -> dict[str, object]:
    if path == "/v1/jobs/batch":
        return {"name": f"fine-{i}", "task": "t", "schedule": {"kind": "every", "interval": 60}}
    return {"task": "t", "args": [i]}


@pytest.mark.parametrize(
    ("path", "item", "status", "code", "field"),
    [pytest.param(*row[1:], id=row[0]) for row in BATCH_ITEMS],
)
def test_hostile_batch_item(
    api: Api, path: str, item: object, status: int, code: str, field: str
) -> None:
    before = api.counts()
    text = json.dumps({"items": [_fine(path, 0), item, _fine(path, 2)]})
    atomic = text[:-1] + ', "all_or_nothing": true}'
    r = api.client.post(path, content=atomic, headers=api.h() | JSON)
    assert r.status_code == status, r.text
    doc = r.json()
    assert doc["error"]["field"] == field and doc["error"]["code"] == "invalid_batch"
    assert [(d["index"], d["status"], d["error"]["code"]) for d in doc["items"]] == [
        (1, status, code)
    ]
    assert api.counts() == before
    r = api.client.post(path, content=text, headers=api.h() | JSON)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert [d["status"] for d in doc["items"]] == [201, status, 201]
    error = doc["items"][1]["error"]
    assert (error["code"], error["field"]) == (code, field) and error["message"]
    jobs, firings, keys = api.counts()
    made = (jobs - before[0], firings - before[1], keys - before[2])
    assert made == ((2, 2, 0) if path == "/v1/firings/batch" else (2, 0, 0))


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "code"),
    [pytest.param(*row[1:], id=row[0]) for row in CATALOG],
)
def test_hostile_input(
    api: Api, method: str, path: str, body: bytes, headers: dict[str, str], status: int, code: str
) -> None:
    api.cron_job("existing")
    before = api.counts()
    r = api.client.request(method, path, content=body, headers=api.h("admin") | headers)
    assert r.status_code == status, r.text
    doc = r.json()
    assert set(doc) == {"error"} and doc["error"]["code"] == code
    assert isinstance(doc["error"]["message"], str) and doc["error"]["message"]
    assert api.counts() == before


def test_a_body_at_the_limit_is_fine_and_one_byte_over_is_413(api: Api) -> None:
    limit = 64 * 1024
    base = job(b', "args": ["')
    filler = b"x" * (limit - len(base) - 3)
    ok = base + filler + b'"]}'
    assert len(ok) == limit
    r = api.client.post("/v1/jobs", content=ok, headers=api.h() | JSON)
    assert r.status_code == 201, r.text[:200]
    over = ok.replace(b'"j"', b'"k"')[:-3] + b'x"]}'
    r = api.client.post("/v1/jobs", content=over, headers=api.h() | JSON)
    assert r.status_code == 413


def test_chunked_bodies_are_limited_while_streaming(api: Api) -> None:
    def chunks():  # type: ignore[no-untyped-def]
        yield b'{"name": "'
        for _ in range(100):
            yield b"x" * 1024

    before = api.counts()
    r = api.client.post("/v1/jobs", content=chunks(), headers=api.h() | JSON)
    assert (r.status_code, r.json()["error"]["code"]) == (413, "payload_too_large")
    assert api.counts() == before


def test_big_but_legal_integers_round_trip(api: Api) -> None:
    big = 10**30
    r = api.call("POST", "/v1/firings", json={"task": "t", "args": [big, -big]})
    assert r.status_code == 201 and r.json()["args"] == [big, -big]


def test_bodies_on_body_less_endpoints_are_still_checked(api: Api) -> None:
    api.cron_job()
    r = api.client.post("/v1/jobs/nightly/pause", content=b"{", headers=api.h() | JSON)
    assert r.status_code == 400
    r = api.client.post("/v1/jobs/nightly/pause", headers=api.h())
    assert r.status_code == 200
