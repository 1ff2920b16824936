"""PostgresStore's high-availability plumbing (used by db.py): cronwheel's own store
URL parameters, the check of a server's role and timeline at checkout, and the stall
watchdog.

High availability (README "Production deployment"):

- the URL may name several hosts (libpq multi-host, ``target_session_attrs=read-write``)
  or a router to the leader (HAProxy); a connection lost in a failover is discarded
  by the pool and the next one is made to whichever host is the primary then: no
  restart of the process;
- a checkout of the primary pool reads the server's role and PostgreSQL timeline
  (one round trip, the one that also checks the connection answers): a standby is
  discarded, and a timeline LOWER than one this process has seen — a demoted or
  split-brained former primary still accepting connections — is refused
  (StoreUnavailableError) before anything is written on it. The leader's epoch carries
  the timeline (core.sql ``acquire_lease``). A connection that answered within the last
  ``TRUST_S`` skips that round trip: a session's server cannot leave the primary role
  or change timeline while the session lives (PostgreSQL demotes only by a restart,
  which ends every session; a promotion only turns a standby's sessions, which this
  pool never keeps, into a primary's), so its role and timeline are the ones read when
  it was checked, and that timeline is still compared with the highest seen, in
  process. What the skipped round trip no longer proves is that the connection is
  alive: a unit that fails on a dead one before its COMMIT is sent has written
  nothing and is run again, a write too, on a connection checked afresh; after any
  connection failure every connection is checked again before its next use
  (``PrimaryCheck.lost``). Through a transaction pooler every checkout is checked
  (its server connection may change between transactions);
- ``replica_hosts=h:p,...`` in the URL opens a second pool
  (``target_session_attrs=prefer-standby``) for the reads that may be stale: status,
  listings of jobs, firings, nodes (``read_replica``). Every lease, claim, enqueue and
  the reads those decisions use stay on the primary;
- a server that stops answering without closing its connections (a frozen primary,
  a partition that drops packets) would block a call until TCP gives up — hours. A
  watchdog shuts the socket of any unit of work running longer than ``stall_timeout``
  (URL parameter, seconds, default 30; ``0`` disables; migrations are exempt): the
  call fails as a lost connection would (StoreUnavailableError; reads are retried on
  a fresh connection, which the multi-host URL makes to the new primary);
- ``pooler=transaction`` (PgBouncer in transaction mode): no server-side prepared
  statements (``prepare_threshold=None``), no session settings in the startup packet
  (the database's own ``TimeZone`` must be UTC: checked on each new connection), and
  no LISTEN through the pooler: ``listen_hosts=h:p,...`` names direct hosts for it,
  else workers poll (store.py ``open_wakeup``).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from cronwheel.errors import StoreError, StoreUnavailableError

log = logging.getLogger(__name__)

# The server's role and timeline in one round trip: 0 on a standby (pg_current_wal_lsn
# fails in recovery; CASE never evaluates it there), else the timeline of the WAL being
# written, which a promotion increments at once (pg_control_checkpoint() lags until the
# end-of-recovery checkpoint).
ROLE_SQL = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN 0 ELSE "
    "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END AS tl,"
    " current_setting('TimeZone') AS tz"
)
# URL parameters that are cronwheel's, not libpq's (removed before connecting)
_OWN_PARAMS = ("pooler", "replica_hosts", "listen_hosts", "stall_timeout")
_STALL_S = 30.0
# a connection that answered this recently is not pinged at checkout (module doc);
# HikariCP's aliveBypassWindowMs (500 ms) is the same rule
TRUST_S = 1.0


@dataclass(frozen=True, slots=True)
class PgUrl:
    """A store URL split into what libpq takes and cronwheel's own parameters."""

    libpq: str
    pooler: str | None = None  # "transaction"
    replica_hosts: str | None = None  # "h:p,h:p"
    listen_hosts: str | None = None
    stall_timeout: float = _STALL_S


def parse_url(url: str) -> PgUrl:
    """Split cronwheel's parameters off a ``postgresql://`` URL; a bad one names itself."""
    parts = urlsplit(url)
    # libpq reads a URI's query with percent-decoding only: '+' is a plus, a space is %20
    pairs = parse_qsl(parts.query.replace("+", "%2B"), keep_blank_values=True)
    own = {k: v for k, v in pairs if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in pairs if k not in _OWN_PARAMS]
    pooler = own.get("pooler")
    if pooler is not None and pooler != "transaction":
        raise StoreError(
            f"bad URL parameter pooler={pooler!r}: the only value is 'transaction' "
            "(PgBouncer pool_mode=transaction; a session pooler needs no parameter)",
            field="store",
        )
    for key in ("replica_hosts", "listen_hosts"):
        if key in own:
            _hosts(own[key], key)
    stall = _STALL_S
    if "stall_timeout" in own:
        try:
            stall = float(own["stall_timeout"])
        except ValueError:
            stall = -1.0
        if not 0 <= stall < 86_400:
            raise StoreError(
                f"bad URL parameter stall_timeout={own['stall_timeout']!r}: seconds, "
                "0 (off) to 86399",
                field="store",
            )
    libpq = urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote)))
    return PgUrl(libpq, pooler, own.get("replica_hosts"), own.get("listen_hosts"), stall)


def _hosts(value: str, key: str) -> tuple[str, str]:
    """``h1:p1,h2:p2`` as libpq's (host, port) lists."""
    hosts, ports = [], []
    for item in value.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise StoreError(
                f"bad URL parameter {key}={value!r}: expected host:port[,host:port...]",
                field="store",
            )
        hosts.append(host)
        ports.append(port)
    return ",".join(hosts), ",".join(ports)


def with_hosts(conninfo: str, value: str, key: str, attrs: str) -> str:
    """``conninfo`` pointed at the hosts of ``value`` with ``target_session_attrs``."""
    params = conninfo_to_dict(conninfo)
    params["host"], params["port"] = _hosts(value, key)
    params.pop("hostaddr", None)
    params["target_session_attrs"] = attrs
    return make_conninfo("", **params)


class _Standby(Exception):
    """The checked server is a standby (PrimaryCheck._role)."""


class PrimaryCheck:
    """The role and timeline of the primary pool's connections (module doc): read by a
    round trip at checkout, or trusted for ``TRUST_S`` after the connection answered;
    and the highest timeline this process has seen on a primary (``timeline``: a lower
    one later is a former primary, never written to)."""

    def __init__(self, *, pooled: bool) -> None:
        self.pooled = pooled
        self.timeline = 0
        self._lock = threading.Lock()
        # connection -> (monotonic time it last answered, its server's timeline)
        self._answered: weakref.WeakKeyDictionary[Any, tuple[float, int]] = (
            weakref.WeakKeyDictionary()
        )
        self._lost_at = 0.0  # the last connection failure seen: older answers expire

    def check(self, conn: Any, *, primary: bool) -> int:
        """The connection's server timeline (0 off the primary pool). Raises
        psycopg.Error for a connection to discard, StoreError to refuse the server."""
        tl = self.trusted(conn, primary=primary)
        if tl is not None:
            return tl
        if not primary:
            conn.execute("")
            return 0
        return self._read(conn)

    async def acheck(self, conn: Any) -> int:
        """:meth:`check` of an async connection of a primary pool (store/postgres/aio.py)."""
        tl = self.trusted(conn, primary=True)
        if tl is not None:
            return tl
        return await self._aread(conn)

    def trusted(self, conn: Any, *, primary: bool) -> int | None:
        """The connection's timeline without a round trip, fenced, if it answered within
        ``TRUST_S`` since any connection failure; else None: it must be checked."""
        answered = self._answered.get(conn)
        if answered is None or self.pooled:
            return None
        at, tl = answered
        if at <= max(self._lost_at, time.monotonic() - TRUST_S):  # before a loss, or old
            return None
        if primary:
            self._fence(tl)
        return tl

    def answered(self, conn: Any, tl: int) -> None:
        """The connection's unit of work went through: it is alive now."""
        self._answered[conn] = (time.monotonic(), tl)

    def lost(self) -> None:
        """A connection failed: every connection is checked before its next use."""
        self._lost_at = time.monotonic()

    def failed(self, conn: Any, exc: BaseException) -> None:
        """The connection's unit of work raised ``exc``: a closed connection or an
        operational error (lost, shut by the watchdog) is a connection failure."""
        if conn.closed or isinstance(exc, psycopg.OperationalError):
            self.lost()

    def _read(self, conn: Any) -> int:
        row = conn.execute(ROLE_SQL).fetchone()
        try:
            return self._role(row)
        except _Standby:
            conn.close()  # never written to; the pool replaces a closed connection
            raise psycopg.OperationalError("the server is a standby") from None

    async def _aread(self, conn: Any) -> int:
        row = await (await conn.execute(ROLE_SQL)).fetchone()
        try:
            return self._role(row)
        except _Standby:
            await conn.close()
            raise psycopg.OperationalError("the server is a standby") from None

    def _role(self, row: Any) -> int:
        """The timeline of ROLE_SQL's row, fenced; _Standby for a standby."""
        assert row is not None
        if self.pooled and row["tz"] not in ("UTC", "Etc/UTC"):
            # through a transaction pooler the startup packet carries no ``options``:
            # the server's own TimeZone must be the store's
            raise StoreError(
                f"pooler=transaction: the database's TimeZone is {row['tz']!r}, not UTC; "
                "run ALTER DATABASE <name> SET timezone = 'UTC' (no session setting "
                "survives a transaction pooler)",
                field="store",
            )
        tl = int(row["tl"])
        if tl == 0:
            raise _Standby
        self._fence(tl)
        return tl

    def _fence(self, tl: int) -> None:
        """Refuse a server of a timeline below the highest this process has seen."""
        with self._lock:
            seen = self.timeline
            if tl >= seen:
                self.timeline = tl
        if tl < seen:
            raise StoreUnavailableError(
                f"postgresql: the server is on timeline {tl} after timeline {seen} was seen: "
                "a former primary (demoted, or cut off by a failover); nothing is written "
                "to it",
                field="store",
            )


class StallWatchdog:
    """Shuts the socket of a connection whose unit of work runs past ``stall_s``
    (0: off): the blocked call fails at once as on a lost connection. One daemon thread
    per store, started on first use."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._watched: dict[int, tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def watch(self, conn: Any) -> None:
        if self.stall_s <= 0:
            return
        with self._lock:
            self._watched[id(conn)] = (time.monotonic() + self.stall_s, conn)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="cronwheel-pg-watchdog", daemon=True
                )
                self._thread.start()

    def unwatch(self, conn: Any) -> None:
        with self._lock:
            self._watched.pop(id(conn), None)

    def close(self) -> None:
        self._closed.set()

    def _run(self) -> None:
        tick = min(1.0, self.stall_s / 4)
        while not self._closed.wait(tick):
            now = time.monotonic()
            with self._lock:
                late = [c for t, c in list(self._watched.values()) if t <= now]
                for c in late:
                    self._watched.pop(id(c), None)
            for c in late:
                _shut(c)


def _shut(conn: Any) -> None:
    """Shut a stalled connection's socket: the call blocked on it fails at once as on a
    lost connection (a frozen server still ACKs at the TCP level, so nothing else would)."""
    try:
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error):
        pass  # already closed
    log.warning("postgresql: a unit of work stalled past stall_timeout; connection shut")


def session_conninfo(url: str, schema: str | None, *, pooled: bool = False) -> str:
    """The URL's parameters, plus UTC session time zone and the schema's search_path
    (through a transaction pooler, none: see PrimaryCheck._read)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise StoreError(f"bad PostgreSQL URL: {exc}", field="store") from exc
    params.setdefault("application_name", f"cronwheel:{os.getpid()}")
    params.setdefault("connect_timeout", 5)
    if pooled:
        return make_conninfo("", **params)
    # jit off: cronwheel's statements read a few rows, but a generic plan over a month of
    # day partitions is estimated past jit_above_cost, and PostgreSQL compiles JIT code at
    # every execution (193 ms a status call at 30 days of 1,000,000 a day: schema.sql
    # migration_32, which sets it on the functions too, for pooled sessions)
    options = [str(params.pop("options", "") or "").strip(), "-c TimeZone=UTC", "-c jit=off"]
    if schema is not None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise StoreError(f"bad schema name {schema!r}", field="schema")
        options.append(f"-c search_path={schema}")
    params["options"] = " ".join(o for o in options if o)
    # application_name (above): one per process, so an operator can tell sessions apart
    # in pg_stat_activity
    return make_conninfo("", **params)
