"""``api``: the HTTP API under a real load generator.

A fresh store (as every workload: a temporary SQLite file, or a temporary PostgreSQL
database) with 1,000 cron jobs (the bulk path), a write token of namespace ``bench``,
one queued firing, and a worker registered as serving the task (as a deployment has
one: a create or an enqueue of a served task needs no read of the served tasks); then
``cronwheel api --auth`` as its own process(es) (``--workers N``) and, for each row,
Debian's ``wrk`` (one thread, ``connections`` keep-alive connections, closed loop) for
``duration_s`` seconds after a one-second warm-up (none with ``warm_up=False``):

- ``create``: ``POST /v1/jobs``, a cron job with a unique name per request;
- ``upsert``: ``PUT /v1/jobs/{name}`` over 100 names, the same definition every time
  (the first 100 create, the rest are unchanged: what a deploy script does);
- ``firing_get``: ``GET /v1/firings/{id}``;
- ``jobs_list``: ``GET /v1/jobs`` (the first page of 100 jobs);
- ``status``: ``GET /v1/status`` (the namespace's counts, backlog, unserved, quota);
- ``enqueue``: ``POST /v1/firings``, a one-off firing of the task due now (the
  namespace's firings_per_minute raised for the run: the row measures the API, not the
  quota).

The planner's statistics are refreshed after the load (``soak.analyze``), as
autovacuum would have done it on a deployment's store. The rows that read run first,
on those 1,000 jobs (a status or a list costs more with
more jobs), then ``upsert``, ``create`` and ``enqueue``; they are reported in the order
above.
Each row reports requests/s and wrk's latency percentiles (p50, p99, max), the answers
that were not 2xx, and the CPU the API processes used per request (from ``/proc``).
On PostgreSQL it also reports the server's CPU per request (every ``postgres`` process
of this host, from ``/proc``: the server must run here) and wrk's own (its rusage), and
their sum with the API's, ``machine_cpu_us_per_request``: the machine's cores divided
by it (``cores_bound_rps``) is the rate no number of API processes can pass here, since
the server and the load generator share the cores with them.
Request bodies come from a Lua script that builds each request (a counter per wrk
thread makes the create names unique).
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from cronwheel.bench.cpu import cpu_by_pid, cpu_delta, on_this_host, postgres_pids, tree
from cronwheel.bench.runner import TASK, fresh_store, store_kind
from cronwheel.bench.soak import analyze
from cronwheel.domain.clock import SystemClock
from cronwheel.domain.models import JobSpec, NodeInfo
from cronwheel.domain.schedules import cron
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.store.protocol import ApiStore
from cronwheel.web.ids import ids_for
from cronwheel.web.tokens import issue_token

NAMESPACE = "bench"
UPSERT_NAMES = 100
PREPOPULATED = 1000
ENQUEUE_RATE_CAP = 100_000_000  # firings a minute: far above what one host can enqueue
_CRON, _TZ = "*/5 * * * *", "Europe/Berlin"
_SCHEDULE = f'{{"kind":"cron","cron":"{_CRON}","tz":"{_TZ}"}}'
_MARK = "CRONWHEEL-WRK "

# wrk runs this script in each of its threads. {u} in a path or body becomes a name
# unique in the run (prefix, thread, counter); {k} cycles over the upsert names.
LUA = r"""
local method, path, body, prefix, cycle
counter = 0
next_thread = 0

function setup(thread)
  thread:set("thread_no", next_thread)
  next_thread = next_thread + 1
end

function init(args)
  method, path, body, prefix, cycle = args[1], args[2], args[3], args[4], tonumber(args[5])
  counter = 0
end

local function fill(text)
  local unique = prefix .. "-" .. thread_no .. "-" .. counter
  local k = tostring((counter + thread_no * 7) % cycle)
  return (text:gsub("{u}", unique):gsub("{k}", k))
end

function request()
  counter = counter + 1
  local b = nil
  if body ~= "" then b = fill(body) end
  return wrk.format(method, fill(path), nil, b)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "CRONWHEEL-WRK {\"requests\":%d,\"duration_us\":%d,\"status_errors\":%d," ..
    "\"socket_errors\":%d,\"p50_us\":%d,\"p99_us\":%d,\"max_us\":%d}\n",
    summary.requests, summary.duration, e.status,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"""


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    method: str
    path: str
    body: str = ""


def rows(firing_id: int) -> list[Row]:
    create = f'{{"name":"c-{{u}}","task":"{TASK}","schedule":{_SCHEDULE}}}'
    put = f'{{"task":"{TASK}","schedule":{_SCHEDULE}}}'
    return [
        Row("create", "POST", "/v1/jobs", create),
        Row("upsert", "PUT", "/v1/jobs/put-{k}", put),
        Row("firing_get", "GET", f"/v1/firings/{firing_id}"),
        Row("jobs_list", "GET", "/v1/jobs?limit=100"),
        Row("status", "GET", "/v1/status"),
        Row("enqueue", "POST", "/v1/firings", f'{{"task":"{TASK}"}}'),
    ]


def wrk_path() -> str | None:
    return shutil.which("wrk")


def run_api(
    store_url: str | None,
    *,
    api_workers: int,
    duration_s: float,
    connections: int,
    progress: Callable[[int, int], None],
    warm_up: bool = True,
) -> dict[str, Any]:
    """Every row against one ``cronwheel api --auth`` on a fresh store; a result dict."""
    wrk = wrk_path()
    if wrk is None:
        raise RuntimeError("wrk is not installed (Debian: apt-get install wrk)")
    with tempfile.TemporaryDirectory() as tmp, fresh_store(store_url, Path(tmp)) as (url, store):
        _, token = issue_token(cast(ApiStore, store), namespace=NAMESPACE, role="write")
        store.set_quota(NAMESPACE, {"firings_per_minute": ENQUEUE_RATE_CAP})
        at = SystemClock().now()
        store.register_node(
            NodeInfo(
                id="bench-worker",
                kind="worker",
                hostname=socket.gethostname(),
                pid=os.getpid(),
                started_at=at,
                heartbeat_at=at,
                info={"tasks": [TASK]},
            )
        )
        firing = store.enqueue_now(
            JobSpec(name="bench-firing", task=TASK, schedule=now_schedule(), namespace=NAMESPACE)
        )
        shown = ids_for(store).encode("firing", firing.id)
        due = SystemClock().now() + timedelta(days=1)
        spec = JobSpec(name="x", task=TASK, schedule=cron(_CRON, tz=_TZ), namespace=NAMESPACE)
        store.create_jobs(
            [(dataclasses.replace(spec, name=f"pre-{i}"), due) for i in range(PREPOPULATED)]
        )
        # the planner's statistics as autovacuum keeps them (soak.analyze): just after a
        # bulk load PostgreSQL planned the jobs list as a bitmap scan of the namespace's
        # 1,000 jobs and a sort (3 ms of the server a request) instead of the walk of
        # 101 ids a table with statistics gets (0.05 ms)
        analyze(url)
        script = Path(tmp) / "row.lua"
        script.write_text(LUA)
        plan = rows(shown)
        out: dict[str, Any] = {
            "workload": "api",
            "store": store_kind(url),
            "api_workers": api_workers,
            "connections": connections,
            "duration_s": duration_s,
            "rows": {},
        }
        rows_out: dict[str, Any] = {}
        server_here = store_kind(url) == "postgresql" and on_this_host(url)
        with _api_server(url, api_workers, Path(tmp)) as (base, pids):
            order = ["firing_get", "jobs_list", "status", "upsert", "create", "enqueue"]
            for i, row in enumerate(sorted(plan, key=lambda r: order.index(r.name))):
                progress(i, len(plan))
                common = [wrk, "-t1", f"-c{connections}", "--latency", "-s", str(script)]
                common += ["-H", f"Authorization: Bearer {token}"]
                common += ["-H", "Content-Type: application/json"]
                prefix = uuid.uuid4().hex[:8]
                if warm_up:
                    _wrk([*common, "-d1s", base, "--", *_args(row, f"w{prefix}")])
                cpu0 = _cpu_seconds(pids())
                server0 = cpu_by_pid(postgres_pids()) if server_here else {}
                wrk0 = _children_cpu_seconds()
                doc = _wrk([*common, f"-d{duration_s:g}s", base, "--", *_args(row, f"m{prefix}")])
                wrk_cpu = _children_cpu_seconds() - wrk0
                server_cpu = cpu_delta(server0, cpu_by_pid(postgres_pids()))
                cpu = _cpu_seconds(pids())
                requests = doc["requests"]
                seconds = doc["duration_us"] / 1e6
                rows_out[row.name] = {
                    "request": f"{row.method} {row.path}",
                    "requests": requests,
                    "rps": round(requests / seconds) if seconds else 0,
                    "p50_ms": round(doc["p50_us"] / 1000, 2),
                    "p99_ms": round(doc["p99_us"] / 1000, 2),
                    "max_ms": round(doc["max_us"] / 1000, 2),
                    "errors": doc["status_errors"] + doc["socket_errors"],
                    "cpu_us_per_request": (
                        None
                        if cpu is None or cpu0 is None or not requests
                        else round((cpu - cpu0) * 1e6 / requests)
                    ),
                }
                if server_here and requests:
                    rows_out[row.name].update(
                        _machine_share(
                            rows_out[row.name]["cpu_us_per_request"],
                            server_cpu * 1e6 / requests,
                            wrk_cpu * 1e6 / requests,
                        )
                    )
            progress(len(plan), len(plan))
        out["rows"] = {row.name: rows_out[row.name] for row in plan}
        return out


def _args(row: Row, prefix: str) -> list[str]:
    return [row.method, row.path, row.body, prefix, str(UPSERT_NAMES)]


def _wrk(argv: list[str]) -> dict[str, Any]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            doc: dict[str, Any] = json.loads(line[len(_MARK) :])
            return doc
    raise RuntimeError(f"wrk failed: {(proc.stderr or proc.stdout).strip()[-500:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _api_server(
    url: str, workers: int, log_dir: Path
) -> Iterator[tuple[str, Callable[[], list[int]]]]:
    """``cronwheel api --auth`` on a free loopback port until it answers ``/readyz``;
    yields its base URL and a function listing the pids of its process tree."""
    port = _free_port()
    argv = [sys.executable, "-m", "cronwheel", "api", "--auth", "--store", url]
    argv += ["--port", str(port)]
    if workers > 1:
        argv += ["--workers", str(workers)]
    env = dict(os.environ, CRONWHEEL_LOG_LEVEL="warning", CRONWHEEL_LOG_FORMAT="json")
    with open(log_dir / "api.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base, proc, log_dir / "api.log")
            yield base, lambda: tree(proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"cronwheel api exited: {log.read_text()[-1000:]}")
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError("cronwheel api did not answer /readyz within 60 s")


def _children_cpu_seconds() -> float:
    """User + system CPU of this process's waited-for children (wrk's, once it ended)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _machine_share(api_us: int | None, server_us: float, wrk_us: float) -> dict[str, Any]:
    """A row's CPU per request on the server and in wrk, their sum with the API's, and
    the rate the machine's cores bound: cores / that sum."""
    out: dict[str, Any] = {
        "server_cpu_us_per_request": round(server_us),
        "wrk_cpu_us_per_request": round(wrk_us),
    }
    if api_us is not None:
        total = api_us + server_us + wrk_us
        out["machine_cpu_us_per_request"] = round(total)
        out["cores_bound_rps"] = round((os.cpu_count() or 1) * 1e6 / total) if total else None
    return out


def _cpu_seconds(pids: list[int]) -> float | None:
    """User + system CPU seconds of ``pids`` (None without /proc, or when one ended)."""
    each = cpu_by_pid(pids)
    return sum(each.values()) if len(each) == len(pids) else None
