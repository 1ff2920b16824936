"""Requests/s of the HTTP API on this machine: job creation and firing lookup.

    .venv/bin/python -m tests.api.bench_api [N]

`cronwheel api --auth` in its own process on 127.0.0.1 (one uvicorn worker,
SQLite on a temp file), driven by 1 and by 8 client threads with keep-alive
connections from this process.
Numbers only; nothing is asserted.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from cronwheel.domain.clock import SystemClock
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.tokens import issue_token


def _rate(url: str, headers: dict[str, str], n: int, threads: int, fn: object) -> float:
    per = n // threads

    def work(t: int) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            for i in range(per):
                fn(http, t, i)  # type: ignore[operator]

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    return per * threads / (time.perf_counter() - start)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(n: int = 2000) -> dict[str, float]:
    """Start `cronwheel api --auth` in a subprocess (so client and server do not share a
    GIL), drive it, stop it."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.db")
        store = SqliteStore(db, clock=SystemClock())
        store.migrate()
        token = issue_token(store, namespace="b", role="write")[1]
        store.close()
        headers = {"Authorization": f"Bearer {token}"}
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cronwheel",
                "api",
                "--auth",
                "--port",
                str(port),
                "--store",
                f"sqlite:///{db}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("cronwheel api did not start")
                time.sleep(0.05)
            for threads in (1, 8):

                def create(http: httpx.Client, t: int, i: int, threads: int = threads) -> None:
                    body = {
                        "name": f"job-{threads}-{t}-{i}",
                        "task": "t",
                        "schedule": {"kind": "cron", "cron": "*/5 * * * *", "tz": "Europe/Paris"},
                    }
                    assert http.post("/v1/jobs", json=body).status_code == 201

                results[f"create_job x{threads}"] = _rate(url, headers, n, threads, create)
            with httpx.Client(base_url=url, headers=headers) as http:
                fid = http.post("/v1/firings", json={"task": "t"}).json()["id"]
            for threads in (1, 8):

                def lookup(http: httpx.Client, t: int, i: int) -> None:
                    assert http.get(f"/v1/firings/{fid}").status_code == 200

                results[f"get_firing x{threads}"] = _rate(url, headers, n, threads, lookup)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return results


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for name, rate in measure(n).items():
        print(f"{name:16} {rate:8.0f} req/s")


if __name__ == "__main__":
    main()
