"""A PostgreSQL HA cluster on loopback, for the HA tests and for users who want to try
cronwheel on the stack it runs on in production:

- etcd: three members (clients on 23790-23792, peers on 23800-23802);
- Patroni: three PostgreSQL 15 nodes (5441-5443; REST API 8441-8443) with short
  timeouts (ttl 20 s, the least Patroni accepts; loop_wait 1 s, retry_timeout 3 s);
- HAProxy: 127.0.0.1:5440 routes to the Patroni leader (health check ``GET /primary``),
  127.0.0.1:5439 to the replicas (``GET /replica``); stats on 127.0.0.1:8404;
- PgBouncer: 127.0.0.1:6432 in transaction mode, a server pool of 10 per database,
  in front of HAProxy's leader port.

etcd, HAProxy and PgBouncer run from Debian's packages (``apt-get install -y etcd-server
pgbouncer haproxy``; PostgreSQL 15 binaries from ``/usr/lib/postgresql/15/bin``); Patroni
must be 3.0.3 or newer (see :func:`find_patroni`: Debian 12's 3.0.2 is too old), from
PyPI into a virtualenv the ``postgres`` user can read::

    python3 -m venv /opt/cronwheel-ha
    /opt/cronwheel-ha/bin/pip install 'patroni[etcd3,psycopg3]>=3.0.3'

Every process runs as the
``postgres`` user when started as root (PostgreSQL, Patroni and PgBouncer refuse root),
in a directory of its own (default ``/tmp/cronwheel-ha``). Only the processes this
script started are ever signalled: their pids are in ``<dir>/pids``. It refuses to
start while any of its ports answers (another cluster, or an earlier run's leftovers);
the tests start it with a guard process that stops it if the test run dies without
its teardown.

    python3 tests/ha/cluster.py start  [--dir D] [--sync]   # up, leader elected, replicas streaming
    python3 tests/ha/cluster.py status [--dir D]            # patronictl list
    python3 tests/ha/cluster.py stop   [--dir D]            # every process, data kept
    python3 tests/ha/cluster.py clean  [--dir D]            # stop, then remove the directory

URLs once started (trust authentication on loopback, database ``postgres``)::

    postgresql://postgres@127.0.0.1:5441,127.0.0.1:5442,127.0.0.1:5443/postgres?target_session_attrs=read-write
    postgresql://postgres@127.0.0.1:5440/postgres                     # HAProxy -> leader
    postgresql://postgres@127.0.0.1:6432/postgres?pooler=transaction  # PgBouncer -> HAProxy

The module is standard library only, so it runs without the project's virtualenv.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PG_BIN = Path(os.environ.get("CRONWHEEL_HA_PG_BIN", "/usr/lib/postgresql/15/bin"))
DEFAULT_DIR = Path(os.environ.get("CRONWHEEL_HA_DIR", "/tmp/cronwheel-ha"))
NODES = ("pg1", "pg2", "pg3")
PG_PORTS = {"pg1": 5441, "pg2": 5442, "pg3": 5443}
API_PORTS = {"pg1": 8441, "pg2": 8442, "pg3": 8443}
ETCD = ("etcd1", "etcd2", "etcd3")
ETCD_CLIENT = {"etcd1": 23790, "etcd2": 23791, "etcd3": 23792}
ETCD_PEER = {"etcd1": 23800, "etcd2": 23801, "etcd3": 23802}
HAPROXY_PRIMARY = 5440
HAPROXY_REPLICAS = 5439
HAPROXY_STATS = 8404
PGBOUNCER_PORT = 6432
POOL_SIZE = 10
TTL, LOOP_WAIT, RETRY_TIMEOUT = 20, 1, 3  # Patroni 4 raises a ttl < 20 to 20
SCOPE = "cronwheel-ha"
NAMESPACE = "/service/"  # Patroni's keys in etcd: <namespace><scope>/leader, ...
HOST = "127.0.0.1"
# patroni/patroni#2689, fixed in 3.0.3: a leader frozen past the TTL wakes up, takes a new
# etcd lease and, its stale cache still naming it the leader, overwrites the new leader's
# key: it is the leader again, the promoted node is demoted and the newer timeline with
# its acknowledged commits discarded (4 of 5 runs of the freeze scenario on 3.0.2)
PATRONI_MIN = (3, 0, 3)
# where to look for Patroni (its bin directory: patroni and patronictl) before $PATH;
# CRONWHEEL_HA_PATRONI_BIN set: only there
PATRONI_VENV_BIN = Path("/opt/cronwheel-ha/bin")
PATRONI_INSTALL = (
    "python3 -m venv /opt/cronwheel-ha && "
    "/opt/cronwheel-ha/bin/pip install 'patroni[etcd3,psycopg3]>=3.0.3'"
)

MULTI_HOST_URL = (
    f"postgresql://postgres@{','.join(f'{HOST}:{p}' for p in PG_PORTS.values())}"
    "/postgres?target_session_attrs=read-write"
)
HAPROXY_URL = f"postgresql://postgres@{HOST}:{HAPROXY_PRIMARY}/postgres"
PGBOUNCER_URL = f"postgresql://postgres@{HOST}:{PGBOUNCER_PORT}/postgres?pooler=transaction"


def _wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def http_json(
    url: str, method: str = "GET", body: Any = None, timeout: float = 2.0
) -> tuple[int, Any]:
    """(status, decoded JSON body or text); (0, None) when nothing answers."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        status = exc.code
    except (OSError, urllib.error.URLError):
        return 0, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


@dataclass
class HaCluster:
    """The cluster's directory, configuration files and processes."""

    base: Path = DEFAULT_DIR
    sync: bool = False  # Patroni synchronous_mode (no acknowledged commit lost on failover)
    # Patroni's bin directory (patroni, patronictl): find_patroni() when start() runs
    patroni_bin: Path | None = None
    # the processes this object started (kept: a dropped Popen of a live child warns)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    # the process that stops the cluster if this one dies without doing so (start(guard=))
    _guard: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    # -- paths and users -------------------------------------------------------------
    @property
    def pids(self) -> Path:
        return self.base / "pids"

    def log(self, name: str) -> Path:
        return self.base / "log" / f"{name}.log"

    def data_dir(self, node: str) -> Path:
        return self.base / "data" / node

    def _user(self) -> list[str]:
        """The prefix that drops root (PostgreSQL, Patroni and PgBouncer refuse it)."""
        if os.geteuid() != 0:
            return []
        return ["runuser", "-u", "postgres", "--"]

    def locate_patroni(self) -> str:
        """Find the Patroni the nodes run (:func:`find_patroni`, asked as the user they
        run as); its version. RuntimeError when none >= :data:`PATRONI_MIN` runs."""
        self.patroni_bin, version = find_patroni(self._user())
        return version

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            for p in [path, *path.rglob("*")]:
                os.chown(p, pw.pw_uid, pw.pw_gid)

    # -- processes ---------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], *, as_postgres: bool) -> int:
        self.log(name).parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log(name), "ab")  # noqa: SIM115 - owned by the child from here on
        env = dict(os.environ, PATH=f"{PG_BIN}:{os.environ.get('PATH', '')}")
        proc = subprocess.Popen(
            (self._user() if as_postgres else []) + argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.base,
            env=env,
            start_new_session=True,  # its own process group: signals reach runuser's child
        )
        out.close()
        old = self.procs.get(name)
        if old is not None:
            old.poll()  # exited: reap it before forgetting it
        self.procs[name] = proc
        self.pids.mkdir(parents=True, exist_ok=True)
        (self.pids / name).write_text(str(proc.pid))
        return proc.pid

    def pid(self, name: str) -> int | None:
        """The process group this script started as ``name`` if a member still runs
        (zombies do not count: a test process is their parent and may not reap them)."""
        path = self.pids / name
        if not path.exists():
            return None
        pid = int(path.read_text())
        proc = self.procs.get(name)
        if proc is not None and proc.pid == pid:
            proc.poll()  # reaps it
        return pid if _group_alive(pid) else None

    def signal(self, name: str, sig: int) -> None:
        pid = self.pid(name)
        if pid is not None:
            os.killpg(pid, sig)

    def stop_process(self, name: str, timeout: float = 20.0) -> None:
        """SIGTERM the process group started as ``name`` (SIGCONT first: it may be
        frozen), SIGKILL after ``timeout``."""
        pid = self.pid(name)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)
            os.killpg(pid, signal.SIGTERM)
        try:
            _wait(lambda: self.pid(name) is None, timeout, f"{name} to exit")
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _wait(lambda: self.pid(name) is None, 10, f"{name} to die")
        proc = self.procs.get(name)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def postmaster_pid(self, node: str) -> int | None:
        path = self.data_dir(node) / "postmaster.pid"
        try:
            pid = int(path.read_text().splitlines()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    # -- configuration -----------------------------------------------------------------
    def _write_configs(self) -> None:
        (self.base / "conf").mkdir(parents=True, exist_ok=True)
        (self.base / "data").mkdir(parents=True, exist_ok=True)
        for node in NODES:
            (self.base / "conf" / f"{node}.yml").write_text(json.dumps(self._patroni(node)))
        (self.base / "conf" / "haproxy.cfg").write_text(self._haproxy())
        (self.base / "conf" / "pgbouncer.ini").write_text(self._pgbouncer())
        (self.base / "conf" / "userlist.txt").write_text('"postgres" ""\n')
        self._chown(self.base)

    def _patroni(self, node: str) -> dict[str, Any]:
        # JSON is YAML: Patroni reads this file as its configuration
        hba = [
            "local all all trust",
            f"host all all {HOST}/32 trust",
            f"host replication all {HOST}/32 trust",
        ]
        return {
            "scope": SCOPE,
            "namespace": NAMESPACE,
            "name": node,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"{HOST}:{API_PORTS[node]}",
                "connect_address": f"{HOST}:{API_PORTS[node]}",
            },
            "etcd3": {"hosts": [f"{HOST}:{ETCD_CLIENT[e]}" for e in ETCD]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1024 * 1024 * 1024,
                    "synchronous_mode": self.sync,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "max_connections": 100,
                            "shared_buffers": "32MB",
                            "fsync": "on",
                            "timezone": "UTC",
                        },
                        "pg_hba": hba,
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
            },
            "postgresql": {
                "listen": f"{HOST}:{PG_PORTS[node]}",
                "connect_address": f"{HOST}:{PG_PORTS[node]}",
                "data_dir": str(self.data_dir(node)),
                "bin_dir": str(PG_BIN),
                "pgpass": str(self.base / f"pgpass.{node}"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "postgres", "password": "postgres"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(self.base)},
                "pg_hba": hba,
                # a rewind that fails (its source demoted under it: the freeze scenario's
                # reinstated leader) leaves the node down for good otherwise; re-clone it
                # from the leader, as an operator's `patronictl reinit` would
                "remove_data_directory_on_rewind_failure": True,
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }

    def _haproxy(self) -> str:
        def servers(check: str) -> str:
            return "".join(
                f"    server {n} {HOST}:{PG_PORTS[n]} check port {API_PORTS[n]}\n" for n in NODES
            )

        common = (
            "    option httpchk\n"
            "    default-server inter 300ms fall 2 rise 1 on-marked-down shutdown-sessions\n"
        )
        return (
            "global\n    maxconn 1000\n"
            "defaults\n    mode tcp\n    retries 2\n    timeout connect 2s\n"
            "    timeout client 30m\n    timeout server 30m\n    timeout check 1s\n"
            f"listen stats\n    mode http\n    bind {HOST}:{HAPROXY_STATS}\n    stats enable\n"
            "    stats uri /\n"
            f"listen primary\n    bind {HOST}:{HAPROXY_PRIMARY}\n{common}"
            "    http-check send meth GET uri /primary\n    http-check expect status 200\n"
            f"{servers('primary')}"
            f"listen replicas\n    bind {HOST}:{HAPROXY_REPLICAS}\n{common}"
            "    http-check send meth GET uri /replica\n    http-check expect status 200\n"
            f"{servers('replica')}"
        )

    def _pgbouncer(self) -> str:
        return (
            "[databases]\n"
            f"* = host={HOST} port={HAPROXY_PRIMARY}\n"
            "[pgbouncer]\n"
            f"listen_addr = {HOST}\nlisten_port = {PGBOUNCER_PORT}\n"
            f"unix_socket_dir = {self.base}\n"
            "auth_type = trust\n"
            f"auth_file = {self.base / 'conf' / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {POOL_SIZE}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
            f"max_db_connections = {POOL_SIZE}\n"
            "max_client_conn = 500\n"
            "server_check_delay = 0\nserver_check_query = select 1\n"
            "server_connect_timeout = 3\nserver_login_retry = 1\n"
            "query_wait_timeout = 30\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            "admin_users = postgres\nstats_users = postgres\n"
            f"pidfile = {self.base / 'pgbouncer.pid'}\n"
        )

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 120.0, *, guard: bool = False) -> None:
        """Every process, then wait for a leader, its replicas and the routers.

        ``guard``: also start a guard process that stops the cluster when this process
        ends without stopping it (killed; or pytest-timeout's ``thread`` method, which
        ends a run that overruns a test's timeout with ``os._exit``: no fixture teardown
        runs). The guard waits for the end of a pipe only this process holds."""
        for tool in ("etcd", "haproxy", "pgbouncer"):
            if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
                raise RuntimeError(
                    f"{tool} is not installed: apt-get install -y etcd-server pgbouncer haproxy"
                )
        if self.patroni_bin is None:
            self.locate_patroni()
        self._check_ports_free()
        self.base.mkdir(parents=True, exist_ok=True)
        if guard and self._guard is None:
            self.log("guard").parent.mkdir(parents=True, exist_ok=True)
            with open(self.log("guard"), "ab") as out:
                here = str(Path(__file__).resolve())
                self._guard = subprocess.Popen(
                    [sys.executable, here, "guard", "--dir", str(self.base)],
                    stdin=subprocess.PIPE,  # our end is not inherited by the cluster's processes
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a Ctrl-C of the test run is not for it
                )
        self._write_configs()
        for e in ETCD:
            self.start_etcd(e)
        _wait(self.etcd_healthy, 30, "etcd")
        for node in NODES:
            self.start_patroni(node)
        self.start_haproxy()
        self.start_pgbouncer()
        self.wait_healthy(timeout)

    def start_etcd(self, member: str) -> None:
        if self.pid(member) is not None:
            return
        initial = ",".join(f"{e}=http://{HOST}:{ETCD_PEER[e]}" for e in ETCD)
        state = "existing" if (self.base / "data" / member).exists() else "new"
        self._spawn(
            member,
            [
                "etcd",
                "--name", member,
                "--data-dir", str(self.base / "data" / member),
                "--listen-client-urls", f"http://{HOST}:{ETCD_CLIENT[member]}",
                "--advertise-client-urls", f"http://{HOST}:{ETCD_CLIENT[member]}",
                "--listen-peer-urls", f"http://{HOST}:{ETCD_PEER[member]}",
                "--initial-advertise-peer-urls", f"http://{HOST}:{ETCD_PEER[member]}",
                "--initial-cluster", initial,
                "--initial-cluster-token", SCOPE,
                "--initial-cluster-state", state,
                "--heartbeat-interval", "100",
                "--election-timeout", "1000",
            ],
            as_postgres=False,
        )  # fmt: skip

    def start_patroni(self, node: str) -> None:
        if self.pid(node) is None:
            cfg = str(self.base / "conf" / f"{node}.yml")
            assert self.patroni_bin is not None, "start() finds Patroni"
            self._spawn(node, [str(self.patroni_bin / "patroni"), cfg], as_postgres=True)

    def start_haproxy(self) -> None:
        if self.pid("haproxy") is None:
            cfg = str(self.base / "conf" / "haproxy.cfg")
            self._spawn("haproxy", [_bin("haproxy"), "-db", "-f", cfg], as_postgres=False)

    def start_pgbouncer(self) -> None:
        if self.pid("pgbouncer") is None:
            ini = str(self.base / "conf" / "pgbouncer.ini")
            self._spawn("pgbouncer", [_bin("pgbouncer"), ini], as_postgres=True)
            _wait(self.pgbouncer_up, 15, "pgbouncer to listen")

    def stop(self) -> None:
        # a node a failed test left frozen (SIGSTOP) would ignore its Patroni's shutdown
        for node in NODES:
            self._signal_postmaster(node, signal.SIGCONT)
        for name in ("pgbouncer", "haproxy", *NODES, *ETCD):
            self.stop_process(name)
        # a postmaster Patroni left behind (Patroni was SIGKILLed): stop it by its data dir
        for node in NODES:
            if self.postmaster_pid(node) is not None:
                self._signal_postmaster(node, signal.SIGCONT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    subprocess.run(
                        [*self._user(), str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir(node)),
                         "-m", "immediate", "-t", "20", "stop"],
                        capture_output=True, timeout=30, check=False,
                    )  # fmt: skip
            if self.postmaster_pid(node) is not None:  # did not stop: end it
                self._signal_postmaster(node, signal.SIGKILL)

        # every process this object started has exited and been reaped
        for name, proc in self.procs.items():
            if proc.poll() is None:
                print(f"cronwheel-ha: {name} (pid {proc.pid}) outlived its group; killed")
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

        if self._guard is not None:  # stopped: the guard has nothing left to do
            assert self._guard.stdin is not None
            self._guard.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._guard.wait(timeout=30)
            self._guard = None

    def clean(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def _signal_postmaster(self, node: str, sig: int) -> None:
        """The node's postmaster (by its data directory's pid file) and its children."""
        pm = self.postmaster_pid(node)
        if pm is None:
            return
        for pid in [pm, *descendants(pm)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _check_ports_free(self) -> None:
        """Refuse to start over another cluster's processes: an etcd or a node of an
        earlier run still listening would answer in place of this cluster's."""
        ports = {
            **{f"etcd {e} client": ETCD_CLIENT[e] for e in ETCD},
            **{f"etcd {e} peer": ETCD_PEER[e] for e in ETCD},
            **{f"PostgreSQL {n}": PG_PORTS[n] for n in NODES},
            **{f"Patroni {n} REST API": API_PORTS[n] for n in NODES},
            "HAProxy primary": HAPROXY_PRIMARY,
            "HAProxy replicas": HAPROXY_REPLICAS,
            "HAProxy stats": HAPROXY_STATS,
            "PgBouncer": PGBOUNCER_PORT,
        }
        busy = [f"{port} ({what})" for what, port in ports.items() if _tcp_answers(HOST, port)]
        if busy:
            raise RuntimeError(
                f"ports in use on {HOST}: {', '.join(busy)} — another HA cluster runs (an "
                "earlier run's? `python3 tests/ha/cluster.py clean --dir <its directory>`; "
                "`ss -ltnp` names the processes)"
            )

    # -- observation ---------------------------------------------------------------------
    def etcd_healthy(self, member: str | None = None) -> bool:
        members = [member] if member else list(ETCD)
        return all(http_json(f"http://{HOST}:{ETCD_CLIENT[m]}/health")[0] == 200 for m in members)

    def etcd_leader(self) -> str | None:
        """The etcd member that is the raft leader (None if no answer agrees on one)."""
        ids, leaders = {}, set()
        for e in ETCD:
            status, body = http_json(
                f"http://{HOST}:{ETCD_CLIENT[e]}/v3/maintenance/status", "POST", {}, timeout=1.0
            )
            if status == 200 and isinstance(body, dict):
                ids[str(body.get("header", {}).get("member_id"))] = e
                leaders.add(str(body.get("leader")))
        if len(leaders) != 1:
            return None
        return ids.get(leaders.pop())

    def node_state(self, node: str) -> dict[str, Any] | None:
        status, body = http_json(f"http://{HOST}:{API_PORTS[node]}/patroni", timeout=1.0)
        return body if status in (200, 503) and isinstance(body, dict) else None

    def dcs(self) -> dict[str, Any] | None:
        """Patroni's keys as etcd holds them (``leader``, ``sync``, ``members/<node>``,
        ...), read from the first etcd member that answers (a linearizable read: what
        the quorum holds now); None when no member answers.

        Not a Patroni node's ``GET /cluster``: a node answers that from its cache of
        etcd, which a node resumed after SIGSTOP serves stale (the leader it was before
        the freeze) until its watch catches up."""
        prefix = f"{NAMESPACE}{SCOPE}/"
        body = {"key": _b64(prefix), "range_end": _b64(prefix[:-1] + chr(ord(prefix[-1]) + 1))}
        for e in ETCD:
            status, out = http_json(
                f"http://{HOST}:{ETCD_CLIENT[e]}/v3/kv/range", "POST", body, timeout=1.0
            )
            if status == 200 and isinstance(out, dict):
                keys: dict[str, Any] = {}
                for kv in out.get("kvs", []):
                    value = base64.b64decode(kv.get("value", "")).decode()
                    with contextlib.suppress(ValueError):
                        value = json.loads(value)
                    keys[base64.b64decode(kv["key"]).decode()[len(prefix) :]] = value
                return keys
        return None

    def cluster_state(self) -> list[dict[str, Any]]:
        """The members as Patroni's ``GET /cluster`` lists them (name, role: leader /
        sync_standby / replica, state, timeline), built from :meth:`dcs`; ``pg_role``
        is the role the node itself last reported (``primary`` / ``replica``; ``master``
        before Patroni 4)."""
        keys = self.dcs()
        if keys is None:
            return []
        leader = keys.get("leader")
        sync = keys.get("sync") if isinstance(keys.get("sync"), dict) else {}
        # Patroni's SyncState: the sync standby counts for the leader that named it only
        standbys = (
            set(str(sync.get("sync_standby") or "").split(","))
            if (sync.get("leader") == leader)
            else set()
        )
        members = []
        for key, data in sorted(keys.items()):
            if not key.startswith("members/") or not isinstance(data, dict):
                continue
            name = key[len("members/") :]
            role = "leader" if name == leader else "sync_standby" if name in standbys else "replica"
            members.append(
                {
                    "name": name,
                    "role": role,
                    "state": data.get("state", ""),
                    "timeline": data.get("timeline"),
                    "pg_role": data.get("role"),
                }
            )
        return members

    def leader(self) -> str | None:
        for m in self.cluster_state():
            if m.get("role") == "leader" and m.get("state") == "running":
                return str(m["name"])
        return None

    def timeline(self) -> int | None:
        for m in self.cluster_state():
            if m.get("role") == "leader":
                return int(m.get("timeline") or 0) or None
        return None

    def healthy(self, replicas: int = 2) -> bool:
        """One running leader, ``replicas`` running replicas, HAProxy and PgBouncer
        answering and, in synchronous mode, a synchronous standby named for this leader:
        until the leader has named one, Patroni refuses a switchover ("can not find
        sync_standby") and promotes no replica when the leader dies — a scenario may not
        start before (right after the cluster's bootstrap that takes a few seconds more
        than the replicas' start)."""
        members = self.cluster_state()
        leaders = [m for m in members if m["role"] == "leader" and m["state"] == "running"]
        running = [
            m
            for m in members
            if m["role"] in ("replica", "sync_standby")
            and m["pg_role"] == "replica"
            and m["state"] in ("streaming", "running")
        ]
        if len(leaders) != 1 or len(running) < replicas:
            return False
        if self.sync and not any(m["role"] == "sync_standby" for m in running):
            return False
        return self.haproxy_routes()

    def haproxy_routes(self) -> bool:
        return _tcp_answers(HOST, HAPROXY_PRIMARY) and self.pgbouncer_up()

    def pgbouncer_up(self) -> bool:
        return _tcp_answers(HOST, PGBOUNCER_PORT)

    def wait_healthy(self, timeout: float = 60.0, replicas: int = 2) -> None:
        try:
            _wait(lambda: self.healthy(replicas), timeout, "a leader and streaming replicas")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; {self.describe()}") from None

    def describe(self) -> str:
        """What the cluster looks like, for a failure message: the members as etcd has
        them and the last lines of each node's log."""
        members = "; ".join(
            f"{m['name']} {m['role']} {m['state']} (reports {m['pg_role']}, "
            f"timeline {m['timeline']})"
            for m in self.cluster_state()
        )
        tails = "".join(
            f"\n--- {node}.log\n"
            + "\n".join(self.log(node).read_text(errors="replace").splitlines()[-15:])
            for node in NODES
            if self.log(node).exists()
        )
        return f"members: {members or 'none in etcd'}{tails}"

    # -- faults --------------------------------------------------------------------------
    def switchover(self, candidate: str | None = None) -> str:
        """Planned switchover through the leader's REST API; returns the old leader.
        Patroni answers once it sees the new leader, or after polling 20 s "Switchover
        status unknown" (503): still under way, the caller waits for the new leader."""
        leader = _wait(self.leader, 30, "a leader")
        body: dict[str, Any] = {"leader": leader}
        if candidate:
            body["candidate"] = candidate
        status, text = http_json(
            f"http://{HOST}:{API_PORTS[leader]}/switchover", "POST", body, timeout=40
        )
        if status != 200 and not (status == 503 and "status unknown" in str(text)):
            raise RuntimeError(f"switchover refused: {status} {text}")
        return str(leader)

    def set_config(self, patch: dict[str, Any]) -> None:
        """PATCH Patroni's dynamic configuration (e.g. ``{"synchronous_mode": True}``)."""
        leader = _wait(self.leader, 30, "a leader")
        status, text = http_json(f"http://{HOST}:{API_PORTS[leader]}/config", "PATCH", patch)
        if status != 200:
            raise RuntimeError(f"config change refused: {status} {text}")
        if "synchronous_mode" in patch:  # what healthy() requires from now on
            self.sync = bool(patch["synchronous_mode"])

    def patronictl(self, *args: str) -> str:
        cfg = str(self.base / "conf" / f"{NODES[0]}.yml")
        if self.patroni_bin is None:
            self.locate_patroni()
        assert self.patroni_bin is not None
        res = subprocess.run(
            [str(self.patroni_bin / "patronictl"), "-c", cfg, *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return res.stdout + res.stderr


def find_patroni(user: list[str] | None = None) -> tuple[Path, str]:
    """Patroni's bin directory and version: the first Patroni >= :data:`PATRONI_MIN` in
    ``$CRONWHEEL_HA_PATRONI_BIN`` (when set, only there), else in
    :data:`PATRONI_VENV_BIN`, else on ``$PATH``. Each candidate is asked its version as
    ``user`` (the ``runuser`` prefix the nodes run with): a Patroni the ``postgres`` user
    cannot read (a virtualenv in a mode 0700 checkout) does not count.

    RuntimeError naming what was found when none is recent enough or none runs."""
    env = os.environ.get("CRONWHEEL_HA_PATRONI_BIN")
    if env:
        dirs = [Path(env)]
    else:
        dirs = [PATRONI_VENV_BIN]
        dirs += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    found: list[str] = []
    seen: set[Path] = set()
    for d in dirs:
        exe = d / "patroni"
        if exe.resolve() in seen or not exe.is_file():
            continue
        seen.add(exe.resolve())
        try:
            res = subprocess.run(
                [*(user or []), str(exe), "--version"],
                capture_output=True, text=True, timeout=60, check=False, cwd="/",
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            found.append(f"{exe}: {exc}")
            continue
        out = (res.stdout + res.stderr).strip()
        version = out.split()[-1] if res.returncode == 0 and out else ""
        try:
            numbers = tuple(int(x) for x in version.split(".")[:3])
        except ValueError:
            found.append(f"{exe}: `--version` answered {out[-200:]!r} (exit {res.returncode})")
            continue
        if numbers >= PATRONI_MIN:
            return d, version
        found.append(f"{exe} is {version}")
    need = ".".join(map(str, PATRONI_MIN))
    raise RuntimeError(
        f"Patroni >= {need} is required (patroni/patroni#2689: an older leader resumed after "
        f"a freeze past the TTL takes leadership back); "
        f"{'; '.join(found) or 'none found'}: {PATRONI_INSTALL}"
        + (" (or unset CRONWHEEL_HA_PATRONI_BIN)" if env else "")
    )


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs (is not a zombie)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid``."""
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            child = int(entry.name)
            out += [child, *descendants(child)]
    return out


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _bin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _tcp_answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


@contextlib.contextmanager
def running(base: Path, *, sync: bool = False) -> Iterator[HaCluster]:
    """A fresh cluster in ``base`` for the block; stopped and removed after it."""
    c = HaCluster(base, sync=sync)
    c.clean()
    try:
        c.start()
        yield c
    finally:
        c.clean()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["start", "stop", "clean", "status", "guard"])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="working directory")
    ap.add_argument("--sync", action="store_true", help="Patroni synchronous_mode")
    args = ap.parse_args(argv)
    c = HaCluster(args.dir.resolve(), sync=args.sync)
    try:
        if args.command == "start":
            c.start()
            print(f"leader {c.leader()}, timeline {c.timeline()}")
            print(f"multi-host: {MULTI_HOST_URL}\nhaproxy:    {HAPROXY_URL}")
            print(f"pgbouncer:  {PGBOUNCER_URL}")
        elif args.command == "stop":
            c.stop()
        elif args.command == "clean":
            c.clean()
        elif args.command == "guard":  # start(guard=True): stop when stdin ends
            sys.stdin.buffer.read()
            if c.pids.exists() and any(c.pid(p.name) for p in c.pids.iterdir()):
                print(f"cronwheel-ha: the process that started {c.base} ended; stopping it")
            c.stop()
        else:
            print(c.patronictl("list"))
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"cronwheel-ha: {args.command}: {exc} (logs: {c.base / 'log'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
