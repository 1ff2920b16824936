"""One HA scenario: the fault suite's :class:`Cluster` (processes, ledger, lease sampler)
pointed at the Patroni cluster, plus a steady stream of immediate firings and the
faults of a database node.

- the scenario's database is created on the cluster through the multi-host URL; the
  ledger's effect table stays on the default server (127.0.0.1:5432), so a failover
  that loses transactions cannot lose the handlers' own record of what ran;
- ``via="multi"``: processes use ``postgresql://h1,h2,h3/db?target_session_attrs=read-write``;
  ``via="pgbouncer"``: ``postgresql://127.0.0.1:6432/db?pooler=transaction`` with
  ``listen_hosts`` naming the nodes for LISTEN;
- :class:`ImmediateLoad` enqueues a ``record`` firing every ``interval`` s from a thread
  (``App.enqueue``): every acknowledged one is an expectation of the ledger; one whose
  outcome was unknown (an error at commit) that exists afterwards is one too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from cronwheel import App
from cronwheel.errors import CronwheelError
from tests.faults.harness import Cluster, JobHandle, wait_until
from tests.faults.ledger import Expectation
from tests.ha.cluster import HOST, PG_PORTS, PGBOUNCER_PORT, HaCluster, descendants

HOSTS = ",".join(f"{HOST}:{p}" for p in PG_PORTS.values())
MULTI = f"postgresql://postgres@{HOSTS}"
RW = "target_session_attrs=read-write"


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass
class Ack:
    at: float  # wall clock of the acknowledgement
    job_id: int
    name: str
    scheduled_for: datetime
    sent: float = 0.0  # wall clock of the call: the commit happened in [sent, at]


@dataclass
class ImmediateLoad:
    """``App.enqueue("record")`` every ``interval`` s until stopped."""

    url: str
    interval: float
    acks: list[Ack] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="immediate-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        app = App(self.url)
        try:
            while not self._stop.is_set():
                try:
                    sent = time.time()
                    f = app.enqueue("record")
                    self.acks.append(Ack(time.time(), f.job_id, f.job_name, f.scheduled_for, sent))
                except CronwheelError:
                    self.errors += 1  # outage: outcome unknown (see Scenario.expectations)
                self._stop.wait(self.interval)
        finally:
            app.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


class HaScenario(Cluster):
    def __init__(
        self, tmp_path: Path, ha: HaCluster, *, via: str = "multi", listen: bool = True
    ) -> None:
        """``listen=False`` (PgBouncer only): no ``listen_hosts``, the workers poll, and
        every server connection of the scenario is PgBouncer's."""
        self.ha = ha
        self.via = via
        self.load: ImmediateLoad | None = None
        self.promoted_at = 0.0
        self.signalled_until = 0.0
        self.reissued: list[Ack] = []
        # stall_timeout: a frozen primary costs a process 5 s, not the default 30
        store_host = MULTI
        store_query = f"{RW}&stall_timeout=5"
        if via == "pgbouncer":
            store_host = f"postgresql://postgres@{HOST}:{PGBOUNCER_PORT}"
            listen_hosts = f"&listen_hosts={HOSTS}" if listen else ""
            # a unit of work may wait in PgBouncer's queue for a server connection
            # (40 workers on 10): the stall bound must exceed that wait
            store_query = f"pooler=transaction{listen_hosts}&stall_timeout=20"
        super().__init__(
            tmp_path, pg_host=MULTI, url_query=RW, store_host=store_host, store_query=store_query
        )

    def sql(self, text: str, params: Any = None, *, retry_s: float = 20.0) -> list[dict[str, Any]]:
        """The test's own statement, with the stall rule of the store: a session on a
        frozen server is shut after 5 s and the statement retried on a new one."""
        timer = threading.Timer(5.0, self._shut_conn)
        timer.start()
        try:
            return super().sql(text, params, retry_s=retry_s)
        finally:
            timer.cancel()

    def _shut_conn(self) -> None:
        conn = self._conn
        if conn is None:
            return
        with contextlib.suppress(OSError, ValueError, psycopg.Error):
            fd = conn.pgconn.socket
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)

    # -- load ---------------------------------------------------------------------------
    def start_load(self, vt: float) -> None:
        """Recurring jobs (every ``sizes.tick``) and immediate firings (4 a second)."""
        for i in range(self.sizes.tickers):
            self.ticker(f"tick-{i}", visibility_timeout=vt)
        self.load = ImmediateLoad(self.store_url("ha-load"), 0.25)
        self.load.start()

    def finish_load(self, drain_timeout: float) -> None:
        """Expectations for the acknowledged immediate firings. A job id acknowledged
        twice was issued again by a new primary that lost the first job (asynchronous
        replication: its sequence went back too): the later job is the expectation, the
        earlier is in :attr:`reissued` for the test to judge."""
        assert self.load is not None
        self.load.stop()
        last = {a.job_id: a for a in self.load.acks}
        self.reissued = [a for a in self.load.acks if last[a.job_id] is not a]
        for a in last.values():
            self.jobs.append(JobHandle(a.name, Expectation(a.job_id, a.name, a.scheduled_for)))
        # enqueues whose commit the client never saw acknowledged, that did commit
        known = {h.expectation.job_id for h in self.jobs}
        for r in self.sql(
            "SELECT j.id, j.name, f.scheduled_for FROM jobs j JOIN firings f ON f.job_id = j.id"
            " WHERE j.name LIKE 'record@%%'"
        ):
            if r["id"] not in known:
                self.jobs.append(
                    JobHandle(r["name"], Expectation(r["id"], r["name"], r["scheduled_for"]))
                )
        self.finish(drain_timeout=drain_timeout)

    def ack_times(self) -> dict[int, float]:
        assert self.load is not None
        return {a.job_id: a.at for a in self.load.acks}

    # -- the database nodes -------------------------------------------------------------
    def postmaster_pids(self, node: str) -> list[int]:
        """The node's postmaster and every process under it (not Patroni)."""
        pm = self.ha.postmaster_pid(node)
        return [] if pm is None else [pm, *descendants(pm)]

    def walsenders(self, node: str) -> list[int]:
        """The node's WAL sender processes (one per streaming replica)."""
        out = []
        for pid in self.postmaster_pids(node):
            with contextlib.suppress(OSError):
                if b"walsender" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    out.append(pid)
        return out

    def node_pids(self, node: str) -> list[int]:
        """Patroni's process group and the node's postmaster with every child."""
        pids: list[int] = []
        group = self.ha.pid(node)
        if group is not None:
            pids += _group_members(group)
        pids += self.postmaster_pids(node)
        return sorted(set(pids))

    def signal_node(self, node: str, sig: int) -> float:
        """Signal every process of the node; the instant the first signal went out (the
        last one's is :attr:`signalled_until`)."""
        pids = self.node_pids(node)  # scanning /proc first: the signals go out together
        t = time.time()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        self.signalled_until = time.time()
        return t

    def timeline(self) -> int:
        rows = self.sql(
            "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))"
            "::bit(32)::bigint AS tl",
            retry_s=60,
        )
        return int(rows[0]["tl"])

    def wait_new_primary(self, old: str, timeout: float) -> str:
        """The new Patroni leader's name, once it runs as the primary; the wall-clock
        instant it was seen so is :attr:`promoted_at`."""
        lead = str(
            wait_until(
                lambda: (lead := self.ha.leader()) not in (None, old) and lead,
                timeout,
                0.1,
                message=f"a leader other than {old}",
            )
        )
        self.promoted_at = time.time()
        return lead

    def timeline_began(self, node: str, timeline: int) -> float:
        """The wall-clock instant ``node`` began ``timeline``: the mtime of its history
        file, which the server writes at the promotion, before it accepts a write on that
        timeline (no commit of the timeline precedes it)."""
        history = self.ha.data_dir(node) / "pg_wal" / f"{timeline:08X}.history"
        return history.stat().st_mtime

    def recovery_figures(self, t_fault: float, timeline: int) -> dict[str, Any]:
        """Seconds from the fault to the new primary (as Patroni reports it), to the
        first firing a leader enqueued after the fault under an epoch of ``timeline``
        (the new primary's; the old one's when Patroni restarted the primary in place,
        without a promotion), and to the first firing finished on the new primary (a
        finish stamped after the promotion was seen)."""
        since = self.promoted_at
        first_enqueue = wait_until(
            lambda: self.sql(
                "SELECT min(enqueued_at) AS t FROM firings"
                " WHERE enqueued_epoch >> 32 = %s AND enqueued_at > to_timestamp(%s)",
                (timeline, t_fault),
                retry_s=60,
            )[0]["t"],
            90,
            0.1,
            message=f"a firing enqueued on timeline {timeline}",
        )
        first_done = wait_until(
            lambda: self.sql(
                "SELECT min(finished_at) AS t FROM firings WHERE finished_at > %s",
                (datetime.fromtimestamp(since, UTC),),
                retry_s=60,
            )[0]["t"],
            90,
            0.1,
            message="a firing finished after the fault",
        )
        return {
            "to_new_primary_s": round(since - t_fault, 2),
            "to_first_enqueue_s": round(first_enqueue.timestamp() - t_fault, 2),
            "to_drain_resumed_s": round(first_done.timestamp() - t_fault, 2),
            "loadavg_1m": load_average(),
        }

    def close(self) -> None:
        if self.load is not None:
            self.load.stop()
        super().close()


def _group_members(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
            out.append(int(entry.name))
    return out


__all__ = ["HaScenario", "load_average", "signal"]
