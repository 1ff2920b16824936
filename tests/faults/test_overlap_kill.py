"""Overlap policies that stop the old firing, with process isolation: the cap holds for
the code that actually executes, not just for the firing rows.

A cap-1 job fires every second; its handler (``overlap_app.busy``, in a child process)
runs 2.5 s and ignores its cancel. With ``terminate_other`` each new firing revokes the
running one, with ``cancel_other`` it asks it to stop (and the job's 1 s cancel grace
ends it). Real scheduler and worker processes on SQLite and on PostgreSQL. The ledger:
each handler's start and end instants written from inside it, and, for a killed one,
the instant its worker found its process gone (the worker's ``handler_stopped`` line).
At no instant do two handlers of the job execute.

The cap is checked on one worker: across workers the store cannot know whether a
revoked handler on another worker still executes (see README, "Process isolation").
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cronwheel import App, every
from cronwheel.domain.firing import FiringState
from tests.conftest import require_service
from tests.faults.harness import ADMIN_URL, FULL, PG_HOST, ensure_postgres_up, wait_until
from tests.faults.ledger_app import LEDGER_ENV
from tests.jsonlog import read_json_lines

HERE = Path(__file__).resolve().parent
RUN_S = 30.0 if FULL else 5.0


@dataclass
class Store:
    url: str
    drop: str | None = None  # the PostgreSQL database to drop at the end


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        yield Store(f"sqlite:///{tmp_path / 'cw.db'}")
        return
    try:
        ensure_postgres_up(timeout=10)
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as admin:
            name = f"cw_fault_{uuid.uuid4().hex[:10]}"
            admin.execute(f'CREATE DATABASE "{name}"')
    except (psycopg.Error, AssertionError, OSError) as exc:
        require_service("PostgreSQL", exc)
    yield Store(f"{PG_HOST}/{name}", drop=name)
    with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Node:
    """A scheduler and one worker of ``overlap_app:app`` on ``url``; SIGKILLed at the end."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.tmp = tmp
        self.ledger = tmp / "ledger.jsonl"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.files: list[Any] = []
        env = dict(os.environ)
        env.pop("CRONWHEEL_FAILPOINTS", None)
        env.update(
            PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            CRONWHEEL_LOG_FORMAT="json",
            CRONWHEEL_LOG_LEVEL="info",
            PYTHONUNBUFFERED="1",
        )
        env[LEDGER_ENV] = str(self.ledger)
        for role, extra in (
            ("scheduler", ["--lease-ttl", "2"]),
            ("worker", ["--concurrency", "4"]),
        ):
            err = (tmp / f"{role}.log").open("wb")
            self.files.append(err)
            argv = [sys.executable, "-m", "cronwheel", role, "overlap_app:app", "--store", url]
            self.procs[role] = subprocess.Popen(
                [*argv, *extra],
                stdout=err,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=tmp,
                start_new_session=True,
            )

    def log(self, role: str) -> list[dict[str, Any]]:
        out = []
        for line in (self.tmp / f"{role}.log").read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                if line.startswith("{"):
                    out.append(json.loads(line))
        return out

    def entries(self) -> list[dict[str, Any]]:
        return read_json_lines(self.ledger, what="ledger")

    def stop(self) -> None:
        """SIGTERM (the worker finishes what it runs), then SIGKILL what is left."""
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        for f in self.files:
            f.close()

    def dump(self) -> str:
        return "\n".join(
            f"--- {role}\n" + "\n".join((self.tmp / f"{role}.log").read_text().splitlines()[-15:])
            for role in self.procs
        )


def intervals(node: Node) -> list[tuple[float, float, int, str]]:
    """(start, end, firing_id, how it ended) of every handler execution in the ledger."""
    entries = node.entries()
    done = {(e["firing_id"], e["attempt"]): e["at"] for e in entries if e["phase"] == "done"}
    gone = {e["firing_id"]: e for e in node.log("worker") if e.get("event") == "handler_stopped"}
    out = []
    for e in entries:
        if e["phase"] != "start":
            continue
        fid = e["firing_id"]
        if (fid, e["attempt"]) in done:
            out.append((e["at"], done[(fid, e["attempt"])], fid, "returned"))
        elif fid in gone:
            out.append((e["at"], gone[fid]["gone_at"], fid, f"killed ({gone[fid]['signal']})"))
        else:
            raise AssertionError(f"firing {fid}: started, neither returned nor killed\n{entries}")
    return out


def most_at_once(spans: list[tuple[float, float, int, str]]) -> int:
    """The most executions overlapping at one instant (an end at the instant of a start
    does not overlap it)."""
    edges = sorted([(s, 1) for s, _, _, _ in spans] + [(e, -1) for _, e, _, _ in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("overlap", ["terminate_other", "cancel_other"])
def test_no_two_handlers_of_a_cap_1_job_execute_at_once(
    overlap: str, store: Store, tmp_path: Path
) -> None:
    client = App(store.url)
    try:
        client.store.migrate()
        client.schedule(
            "busy",
            every("1s"),
            name="overlapping",
            overlap=overlap,
            max_concurrency=1,
            cancel_grace=1,
            retries=0,
            kwargs={"seconds": 2.5},
        )
        node = Node(store.url, tmp_path)
        try:
            started = wait_until(
                lambda: len([e for e in node.entries() if e["phase"] == "start"]) >= 2,
                30,
                message=lambda: f"two handlers to start\n{node.dump()}",
            )
            assert started
            time.sleep(RUN_S)  # the stream of overlapping firings runs on: the ledger grows
            client.store.set_paused(client.namespace, "overlapping", True)

            def settled() -> bool:
                busy = [FiringState.QUEUED, FiringState.CLAIMED, FiringState.RUNNING]
                return not client.store.list_firings(states=busy)

            wait_until(settled, 30, 0.1, message=lambda: f"the job to settle\n{node.dump()}")
        finally:
            node.stop()
        spans = intervals(node)
        killed = [s for s in spans if s[3].startswith("killed")]
        print(f"\n[overlap {overlap}] executions {len(spans)}, killed {len(killed)}")
        assert len(spans) >= 3, node.dump()
        assert killed, f"no handler was stopped by the policy: {spans}"
        assert most_at_once(spans) == 1, f"handlers of a cap-1 job overlapped: {sorted(spans)}"
    finally:
        client.close()
