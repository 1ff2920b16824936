"""Fault-suite harness: real ``cronwheel`` processes on a real PostgreSQL, real signals.

- :class:`Cluster` creates a fresh database per scenario (``cw_fault_<random>``,
  dropped ``WITH (FORCE)`` at teardown), the effect table of the ledger app, and
  starts scheduler and worker processes from the installed package
  (``python -m cronwheel ...``), each with its own environment: ``PYTHONPATH``
  with tests/faults (for ``ledger_app:app``), JSON logs to its own file, optional
  failpoints, and its own ``application_name`` in the store URL (so a test can
  find its database sessions in ``pg_stat_activity``). Teardown SIGKILLs every
  process group it started, pass or fail.
- :class:`LeaseSampler` records the lease row every few milliseconds (database
  time), the history the checker uses for "one leader at a time".
- :func:`wait_until` is bounded polling; nothing here sleeps and hopes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from cronwheel import App, at, every
from cronwheel.domain.models import JobPolicies
from tests.faults.ledger import AcquiredEvent, Expectation, LeaseSample, Report, check
from tests.faults.ledger_app import EFFECTS_DDL, EFFECTS_URL_ENV, LEDGER_ENV

HERE = Path(__file__).resolve().parent
APP_REF = "ledger_app:app"
PG_HOST = os.environ.get("CRONWHEEL_FAULTS_PG", "postgresql://postgres@127.0.0.1:5432")
ADMIN_URL = f"{PG_HOST}/test"
FULL = os.environ.get("CRONWHEEL_FAULTS_FULL", "") not in {"", "0", "false", "no"}
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Sizes:
    """Smoke size (CI default) or full size (``CRONWHEEL_FAULTS_FULL=1``)."""

    full: bool
    lease_ttl: float  # scheduler --lease-ttl, seconds
    tick: str  # interval of the recurring ledger jobs
    tickers: int  # recurring jobs under load
    batch: int  # one-shot jobs due in the same instant (scenario 1)
    run_s: float  # healthy running time around a fault
    vt: float  # visibility timeout of the slow jobs (> the worker's 2 s heartbeat: see README)
    churn_s: float  # leader churn duration
    churn_every_s: float
    terminate_rounds: int


SIZES = (
    Sizes(
        full=True,
        lease_ttl=2.0,
        tick="100ms",
        tickers=6,
        batch=1000,
        run_s=10.0,
        vt=3.0,
        churn_s=60.0,
        churn_every_s=4.0,
        terminate_rounds=30,
    )
    if FULL
    else Sizes(
        full=False,
        lease_ttl=2.0,
        tick="250ms",
        tickers=2,
        batch=60,
        run_s=3.0,
        vt=3.0,
        churn_s=18.0,
        churn_every_s=3.0,
        terminate_rounds=8,
    )
)


# The fault suite tests P2-P4 in isolation: its jobs let firings of one job overlap, so
# that a catch-up burst after a takeover is run, not SKIPPED by the P6 overlap policy
# (where the store has that policy; the default for recurring jobs is ``skip``).
OVERLAP: dict[str, Any] = (
    {"overlap": "allow"} if "overlap" in {f.name for f in dataclasses.fields(JobPolicies)} else {}
)


# -- waiting -----------------------------------------------------------------------------


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition",
) -> T:
    """Poll ``predicate`` every ``interval`` s until it returns something truthy (returned);
    AssertionError naming ``message`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {text}")
        time.sleep(interval)


def parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


# -- processes ---------------------------------------------------------------------------


@dataclass(eq=False)
class Proc:
    """One role process and its log file."""

    name: str
    role: str  # "scheduler" | "worker"
    popen: subprocess.Popen[bytes]
    log_path: Path
    app_name: str
    started: float
    files: list[Any] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def kill(self) -> float:
        """SIGKILL; returns the wall-clock instant of the kill, once the process is gone."""
        t = time.time()
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)
        return t

    def lines(self) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        out = []
        for line in self.lines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut by SIGKILL mid-write
            if name is None or entry.get("event") == name:
                out.append(entry)
        return out

    def failpoint_hits(self, name: str) -> int:
        return sum(1 for ln in self.lines() if ln.startswith(f"failpoint_hit name={name} "))

    def tracebacks(self) -> int:
        lines = self.lines()
        return sum(1 for ln in lines if ln.startswith("Traceback")) + sum(
            1 for e in self.events() if "exception" in e
        )

    def close_files(self) -> None:
        for f in self.files:
            f.close()
        self.files.clear()


# -- lease history -----------------------------------------------------------------------


class LeaseSampler:
    """Samples the lease row (and the database's now()) every ``interval`` s in a thread;
    keeps every sample where the row changed. Survives database restarts."""

    def __init__(self, url: str, interval: float = 0.02) -> None:
        self.url = url
        self.interval = interval
        self.samples: list[LeaseSample] = []
        self.errors = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="lease-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(
                        self.url, autocommit=True, row_factory=dict_row, connect_timeout=2
                    )
                row = conn.execute(
                    "SELECT holder, epoch, acquired_at, expires_at, clock_timestamp() AS db_now"
                    " FROM leases WHERE name = 'dispatcher'"
                ).fetchone()
                if row is not None:
                    s = LeaseSample(
                        db_now=row["db_now"],
                        holder=row["holder"],
                        epoch=row["epoch"],
                        acquired_at=row["acquired_at"],
                        expires_at=row["expires_at"],
                    )
                    with self._lock:
                        last = self.samples[-1] if self.samples else None
                        if last is None or (last.epoch, last.holder, last.expires_at) != (
                            s.epoch,
                            s.holder,
                            s.expires_at,
                        ):
                            self.samples.append(s)
            except psycopg.Error:
                self.errors += 1
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
                conn = None
                self._stop.wait(0.1)
                continue
            self._stop.wait(self.interval)
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def history(self) -> list[LeaseSample]:
        with self._lock:
            return list(self.samples)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# -- the cluster -------------------------------------------------------------------------


@dataclass(slots=True)
class JobHandle:
    name: str
    expectation: Expectation


class Cluster:
    """One scenario: its database, its processes, its ledger.

    ``engine`` is the store the processes share: ``postgres`` (the scenario's database)
    or ``sqlite`` (a file in the scenario's directory; the effect table of the ledger
    stays in the scenario's PostgreSQL database, and there is no lease sampler). With
    ``sqlite``, read the store through :attr:`client` (``counts`` and ``wait_drained``
    do): :meth:`sql`, :meth:`lease` and :meth:`check` see the PostgreSQL database only.
    """

    def __init__(
        self,
        tmp_path: Path,
        sizes: Sizes = SIZES,
        *,
        engine: str = "postgres",
        pg_host: str = PG_HOST,
        url_query: str = "",
        store_host: str | None = None,
        store_query: str = "",
    ) -> None:
        """``pg_host`` (``postgresql://user@host:port[,host:port...]``) and ``url_query``
        (libpq parameters, e.g. ``target_session_attrs=read-write``) name the server of
        the scenario's database: the test's sessions and the lease sampler use them.
        ``store_host``/``store_query``, when given, are what the processes' store URL
        uses instead (e.g. PgBouncer and ``pooler=transaction``). On another server than
        the default one, the effect table of the ledger stays on the default server: a
        failover that loses transactions must not lose the handlers' own record."""
        if engine not in {"postgres", "sqlite"}:
            raise ValueError(f"engine must be postgres or sqlite, not {engine!r}")
        self.tmp = tmp_path
        self.sizes = sizes
        self.engine = engine
        self.pg_host = pg_host
        self.url_query = url_query
        self.store_host = store_host or pg_host
        self.store_query = store_query if store_host else url_query
        self.db_name = f"cw_fault_{uuid.uuid4().hex[:10]}"
        self.db_url = f"{pg_host}/{self.db_name}"
        self.effects_db_url = f"{PG_HOST}/{self.db_name}" if pg_host != PG_HOST else self.db_url
        self.ledger_path = tmp_path / "executions.jsonl"
        self.procs: list[Proc] = []
        self.jobs: list[JobHandle] = []
        self.disrupted: dict[int, str] = {}
        self.figures: dict[str, Any] = {}
        self._conn: psycopg.Connection[Any] | None = None
        self._client: App | None = None
        self._seq = 0
        for admin_url in self._admin_urls():
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as admin:
                admin.execute(f'CREATE DATABASE "{self.db_name}"')
        with psycopg.connect(self.effects_db_url, autocommit=True) as conn:
            conn.execute(EFFECTS_DDL)
        # migrate once, up front (processes would race to do it; that is tested elsewhere)
        self.client.store.migrate()
        self.sampler = LeaseSampler(self.url("fault-sampler")) if engine == "postgres" else None

    # -- urls and sql ---------------------------------------------------------------
    @property
    def admin_url(self) -> str:
        """The maintenance database of the scenario's server."""
        return f"{self.pg_host}/postgres" + (f"?{self.url_query}" if self.url_query else "")

    def _admin_urls(self) -> list[str]:
        """Where the scenario's database is created: its server, and the default one
        too when the effect table lives there (another server)."""
        if self.pg_host == PG_HOST:
            return [ADMIN_URL]
        return [self.admin_url, ADMIN_URL]

    def url(self, app_name: str) -> str:
        query = self.url_query + "&" if self.url_query else ""
        return f"{self.db_url}?{query}application_name={app_name}"

    def effects_url(self) -> str:
        return f"{self.effects_db_url}?application_name=fault-effects"

    def store_url(self, app_name: str) -> str:
        """The store of the scenario's processes (and of :attr:`client`)."""
        if self.engine == "sqlite":
            return f"sqlite:///{self.tmp / 'store.db'}"
        query = self.store_query + "&" if self.store_query else ""
        return f"{self.store_host}/{self.db_name}?{query}application_name={app_name}"

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.url("fault-test"), autocommit=True, row_factory=dict_row, connect_timeout=3
            )
        return self._conn

    def shown(self, kind: str, internal: int) -> int:
        """The id users (and a handler's context and key) see for the store's job or
        firing ``internal`` (cronwheel.domain.ids)."""
        from cronwheel.web.ids import ids_for

        return ids_for(self.client.store).encode("job" if kind == "job" else "firing", internal)

    def sql(self, text: str, params: Any = None, *, retry_s: float = 20.0) -> list[dict[str, Any]]:
        """Run one statement on the test's own session; reconnect (bounded) after a restart."""
        deadline = time.monotonic() + retry_s
        while True:
            try:
                cur = self.conn.execute(text, params)
                return cur.fetchall() if cur.description is not None else []
            except psycopg.OperationalError:
                if self._conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        self._conn.close()
                self._conn = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    @property
    def client(self) -> App:
        """The test's own App on the scenario database (it creates and pauses jobs)."""
        if self._client is None:
            self._client = App(self.store_url("fault-client"))
        return self._client

    # -- processes --------------------------------------------------------------------
    def _start(
        self,
        role: str,
        name: str,
        args: list[str],
        failpoints: str | None,
        *,
        wrap: list[str] | None = None,
        env_extra: dict[str, str] | None = None,
        app_ref: str = APP_REF,
    ) -> Proc:
        """``wrap``: a command the process runs under (``faketime -f +3s``); ``env_extra``:
        more environment (libfaketime's settings); ``app_ref``: the app it loads."""
        self._seq += 1
        app_name = f"fault-{name}"
        env = dict(os.environ)
        env.pop("CRONWHEEL_FAILPOINTS", None)
        env.update(
            {
                "PYTHONPATH": os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(
                    os.pathsep
                ),
                "CRONWHEEL_LOG_FORMAT": "json",
                "CRONWHEEL_LOG_LEVEL": "debug" if role == "scheduler" else "info",
                LEDGER_ENV: str(self.ledger_path),
                EFFECTS_URL_ENV: self.effects_url(),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if failpoints:
            env["CRONWHEEL_FAILPOINTS"] = failpoints
        env.update(env_extra or {})
        log_path = self.tmp / f"{name}.log"
        out = (self.tmp / f"{name}.out").open("wb")
        err = log_path.open("wb")
        argv = [
            *(wrap or []),
            sys.executable,
            "-m",
            "cronwheel",
            role,
            *([] if role == "api" else [app_ref]),
            "--store",
            self.store_url(app_name),
            *args,
        ]
        popen = subprocess.Popen(
            argv,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.tmp,
            start_new_session=True,
        )
        proc = Proc(name, role, popen, log_path, app_name, time.time(), [out, err])
        self.procs.append(proc)
        return proc

    def start_scheduler(
        self,
        name: str | None = None,
        *,
        failpoints: str | None = None,
        lease_ttl: float = 0,
        wrap: list[str] | None = None,
        env_extra: dict[str, str] | None = None,
    ) -> Proc:
        name = name or f"s{self._seq + 1}"
        ttl = lease_ttl or self.sizes.lease_ttl
        args = ["--lease-ttl", str(ttl)]
        return self._start("scheduler", name, args, failpoints, wrap=wrap, env_extra=env_extra)

    def start_worker(
        self,
        name: str | None = None,
        *,
        failpoints: str | None = None,
        concurrency: int = 8,
        args: list[str] | None = None,
        wrap: list[str] | None = None,
        env_extra: dict[str, str] | None = None,
        app_ref: str = APP_REF,
    ) -> Proc:
        name = name or f"w{self._seq + 1}"
        argv = ["--concurrency", str(concurrency), *(args or [])]
        return self._start(
            "worker", name, argv, failpoints, wrap=wrap, env_extra=env_extra, app_ref=app_ref
        )

    def start_api(self, port: int, name: str = "api") -> Proc:
        """``cronwheel api`` on 127.0.0.1:``port`` (no auth: loopback); wait for
        ``Client(...).ready()`` before using it."""
        return self._start("api", name, ["--port", str(port)], None)

    def schedulers(self) -> list[Proc]:
        return [p for p in self.procs if p.role == "scheduler"]

    def workers(self) -> list[Proc]:
        return [p for p in self.procs if p.role == "worker"]

    def by_pid(self, pid: int) -> Proc | None:
        return next((p for p in self.procs if p.pid == pid), None)

    def wait_started(self, procs: Iterable[Proc], timeout: float = 15.0) -> None:
        for p in procs:
            event = "scheduler_started" if p.role == "scheduler" else "worker_started"
            wait_until(
                lambda p=p, event=event: p.events(event) or not p.alive(),
                timeout,
                message=f"{p.name} to start",
            )
            assert p.alive(), f"{p.name} died at start:\n" + "\n".join(p.lines()[-20:])

    # -- leadership ---------------------------------------------------------------------
    def lease(self) -> dict[str, Any] | None:
        rows = self.sql(
            "SELECT holder, epoch, acquired_at, expires_at, expires_at > now() AS valid"
            " FROM leases WHERE name = 'dispatcher'"
        )
        return rows[0] if rows else None

    def leader(self, lease: dict[str, Any] | None = None) -> Proc | None:
        """The live scheduler process holding a valid lease (by database time), if any;
        of ``lease`` (a row read by the caller) when given."""
        if lease is None:
            lease = self.lease()
        if lease is None or not lease["valid"]:
            return None
        pid = int(lease["holder"].split(":")[-2])
        proc = self.by_pid(pid)
        return proc if proc is not None and proc.alive() else None

    def wait_leader(self, timeout: float, *, not_epoch: int | None = None) -> tuple[Proc, int]:
        def probe() -> tuple[Proc, int] | None:
            # one read: the lease may change hands between two (a new leader's process
            # paired with the killed leader's epoch)
            lease = self.lease()
            proc = self.leader(lease)
            if proc is None or lease is None:
                return None
            if not_epoch is not None and lease["epoch"] <= not_epoch:
                return None
            return proc, int(lease["epoch"])

        return wait_until(probe, timeout, message="a leader")

    def acquired_events(self) -> list[AcquiredEvent]:
        out = []
        for p in self.schedulers():
            for e in p.events("lease_acquired"):
                out.append(AcquiredEvent(parse_ts(e["timestamp"]), e["holder"], e["epoch"], p.name))
        return out

    def first_enqueue_of_epoch(self, epoch: int) -> datetime | None:
        rows = self.sql(
            "SELECT min(enqueued_at) AS t FROM firings WHERE enqueued_epoch = %s", (epoch,)
        )
        return rows[0]["t"]

    # -- jobs ---------------------------------------------------------------------------
    def ticker(
        self, name: str, interval: str | None = None, task: str = "record", **policies: Any
    ) -> JobHandle:
        """A recurring ``record`` job; it owes every instant from its first one up to
        the moment it is paused (see :meth:`finish`)."""
        sched = every(interval or self.sizes.tick)
        opts = {"misfire": "fire_all", "misfire_grace": 60, "retries": 5, "visibility_timeout": 5}
        opts.update(OVERLAP)
        opts.update(policies)
        job = self.client.schedule(task, sched, name=name, **opts)
        assert job.next_fire_at is not None
        handle = JobHandle(name, Expectation(job.id, name, job.next_fire_at, sched))
        self.jobs.append(handle)
        return handle

    def one_shot(
        self, name: str, when: datetime, task: str = "record", **policies: Any
    ) -> JobHandle:
        opts: dict[str, Any] = {"retries": 5, "misfire_grace": 60, "visibility_timeout": 5}
        opts.update(OVERLAP)
        opts.update(policies)
        job = self.client.schedule(task, at(when), name=name, **opts)
        handle = JobHandle(name, Expectation(job.id, name, when))
        self.jobs.append(handle)
        return handle

    def pause_all(self) -> datetime:
        """Pause every recurring job; their required window ends a margin before now
        (the leader enqueues ``lead`` = 0.5 s ahead, so the margin is generous)."""
        t = datetime.now(UTC)
        for h in self.jobs:
            if h.expectation.schedule is not None:
                self.client.store.set_paused(self.client.namespace, h.name, True)
        return t

    def finish(self, drain_timeout: float = 30.0, margin_s: float = 1.0) -> None:
        """Pause recurring jobs, fix their required windows, wait until nothing is
        queued or running (bounded)."""
        paused_at = self.pause_all()
        for h in self.jobs:
            e = h.expectation
            if e.schedule is not None:
                h.expectation = Expectation(
                    e.job_id, e.name, e.first, e.schedule, paused_at - timedelta(seconds=margin_s)
                )
        self.wait_drained(drain_timeout)

    def counts(self) -> dict[str, int]:
        if self.engine == "sqlite":
            firings = self.client.store.list_firings(limit=1_000_000)
            return dict(Counter(f.state.value for f in firings))
        rows = self.sql("SELECT state, count(*) AS n FROM firings GROUP BY state")
        return {r["state"]: int(r["n"]) for r in rows}

    def wait_drained(self, timeout: float) -> None:
        def drained() -> bool:
            c = self.counts()
            return not any(c.get(s) for s in ("scheduled", "queued", "claimed", "running"))

        wait_until(drained, timeout, 0.1, message=lambda: f"queue drained: {self.counts()}")

    def one_shots_done(self, handles: list[JobHandle]) -> bool:
        ids = [h.expectation.job_id for h in handles]
        rows = self.sql(
            "SELECT count(*) AS n FROM firings WHERE job_id = ANY(%s) AND state = 'succeeded'",
            (ids,),
        )
        return int(rows[0]["n"]) >= len(ids)

    # -- checking -----------------------------------------------------------------------
    def check(self, *, epochs: bool = True) -> Report:
        effects = None
        if self.effects_db_url != self.db_url:
            effects = psycopg.connect(self.effects_url(), row_factory=dict_row, autocommit=True)
        try:
            return self._check(epochs, effects)
        finally:
            if effects is not None:
                effects.close()

    def _check(self, epochs: bool, effects: psycopg.Connection[Any] | None) -> Report:
        return check(
            self.conn,
            self.ledger_path,
            [h.expectation for h in self.jobs],
            disrupted_pids=self.disrupted,
            lease_samples=self.sampler.history() if epochs and self.sampler else None,
            acquired=self.acquired_events() if epochs else None,
            effects_conn=effects,
        )

    def executions_log(self) -> list[dict[str, Any]]:
        from tests.faults.ledger import read_log

        return read_log(self.ledger_path)

    def assert_healthy_logs(self, max_tracebacks: int = 0) -> None:
        for p in self.procs:
            n = p.tracebacks()
            assert n <= max_tracebacks, f"{p.name}: {n} tracebacks:\n" + "\n".join(p.lines()[-30:])

    # -- teardown -----------------------------------------------------------------------
    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        for p in self.procs:
            if p.alive():
                p.signal(signal.SIGKILL)
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=10)
            p.close_files()
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None
        ensure_postgres_up()
        for admin_url in self._admin_urls():
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')

    def dump(self) -> str:
        """The tail of every process log, for a failure message."""
        parts = []
        for p in self.procs:
            parts.append(f"--- {p.name} pid {p.pid} rc {p.popen.poll()}")
            parts += p.lines()[-12:]
        return "\n".join(parts)


# -- the server itself -------------------------------------------------------------------


def pg_version() -> str:
    return sorted(os.listdir("/etc/postgresql"))[-1]


def pg_ctl(*args: str) -> None:
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", pg_version(), "main", *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


def postgres_accepts() -> bool:
    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=1) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def ensure_postgres_up(timeout: float = 30.0) -> None:
    if postgres_accepts():
        return
    with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
        pg_ctl("start")
    wait_until(postgres_accepts, timeout, 0.2, message="PostgreSQL to accept connections")
