"""Acceptance-test harness: real ``cronwheel`` processes on the real clock.

- :class:`Cluster` (fixture ``cluster``) owns a SQLite store and a ledger file in
  ``tmp_path``, starts role processes (``serve``, ``scheduler``, ``worker``) in
  their own sessions (so ``killpg`` reaches a supervisor *and* its children),
  captures their stdout/stderr to files, runs one-shot CLI commands, and kills
  every process group it started at teardown, pass or fail.
- :func:`wait_until` polls a condition (50 ms by default) up to a deadline and
  returns as soon as it holds: no sleep-and-hope.
- :func:`read_ledger` / :func:`check_ledger` compare the firings a test expects
  with the executions the ledger app recorded: lost, phantom and duplicate
  executions.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cronwheel.store.sqlite.turn import SUFFIX as TURN_SUFFIX
from cronwheel.store.url import open_store
from tests.jsonlog import read_json_lines

HERE = Path(__file__).resolve().parent
APP_REF = "ledger_app:app"
T = TypeVar("T")


# -- waiting ---------------------------------------------------------------------------


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition",
) -> T:
    """Poll ``predicate`` every ``interval`` s until it returns a truthy value (returned).

    Raises AssertionError naming ``message`` (a string or a callable giving one,
    evaluated at failure time) after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {text}")
        time.sleep(interval)


# -- the ledger ------------------------------------------------------------------------


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """Every whole line of the ledger as a dict (a torn one fails: tests/jsonlog.py)."""
    return read_json_lines(path, what="ledger")


def executions(
    entries: Iterable[dict[str, Any]], *, job: str | None = None, job_prefix: str | None = None
) -> list[dict[str, Any]]:
    """The completed executions (``phase == "done"``), optionally of one job or job prefix."""
    return [
        e
        for e in entries
        if e["phase"] == "done"
        and (job is None or e["job"] == job)
        and (job_prefix is None or e["job"].startswith(job_prefix))
    ]


@dataclass(slots=True)
class LedgerReport:
    """Expected firings (idempotency keys) versus executions observed in the ledger."""

    expected: set[str]
    counts: Counter[str]
    lost: set[str] = field(default_factory=set)  # expected, never executed to the end
    phantom: set[str] = field(default_factory=set)  # executed, but no such firing was expected
    duplicates: dict[str, int] = field(default_factory=dict)  # executed more than once

    @property
    def ok(self) -> bool:
        return not (self.lost or self.phantom or self.duplicates)

    def summary(self) -> str:
        def some(keys: Iterable[str]) -> list[str]:
            return sorted(keys)[:10]

        return (
            f"expected {len(self.expected)}, executed {len(self.counts)} distinct "
            f"({sum(self.counts.values())} executions); lost {len(self.lost)} {some(self.lost)}; "
            f"phantom {len(self.phantom)} {some(self.phantom)}; duplicates "
            f"{len(self.duplicates)} {dict(sorted(self.duplicates.items())[:10])}"
        )


def check_ledger(expected_keys: Iterable[str], done: Iterable[dict[str, Any]]) -> LedgerReport:
    """Compare expected idempotency keys with completed executions (``"done"`` lines)."""
    expected = set(expected_keys)
    counts = Counter(e["key"] for e in done)
    return LedgerReport(
        expected=expected,
        counts=counts,
        lost=expected - set(counts),
        phantom=set(counts) - expected,
        duplicates={k: n for k, n in counts.items() if n > 1},
    )


# -- processes -------------------------------------------------------------------------


@dataclass(slots=True)
class Proc:
    """A role process started in its own session (its pid is its process-group id)."""

    name: str
    popen: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def logs(self) -> list[dict[str, Any]]:
        """The JSON log lines of this process (and of its children, which share stderr)."""
        out = []
        for line in self.stderr().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def events(self, event: str) -> list[dict[str, Any]]:
        return [entry for entry in self.logs() if entry.get("event") == event]

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.stderr().splitlines()[-lines:])

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a supervisor and its children)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def group_alive(self) -> bool:
        """Whether any process of this group still exists (zombies included)."""
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        return True


class Cluster:
    """One store + one ledger in ``tmp_path``, and the processes of one test."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.db_path = tmp_path / "cronwheel.db"
        self.store_url = f"sqlite:///{self.db_path}"  # absolute path: sqlite:////tmp/...
        assert self.store_url.startswith("sqlite:////")
        self.ledger_path = tmp_path / "ledger.jsonl"
        self.procs: list[Proc] = []
        self._seq = 0

    # -- environment -----------------------------------------------------------------
    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CRONWHEEL_", "LEDGER_", "PYTEST_"))
        }
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
        )
        env["CRONWHEEL_LOG_FORMAT"] = "json"
        env["LEDGER_PATH"] = str(self.ledger_path)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra or {})
        return env

    # -- long-running roles --------------------------------------------------------------
    def start(
        self,
        role: str,
        *args: str,
        env: dict[str, str] | None = None,
        app: str | None = APP_REF,
        name: str | None = None,
    ) -> Proc:
        """Start ``cronwheel ROLE [APP] --store URL ARGS...`` in a new session."""
        self._seq += 1
        label = name or role
        stem = f"{self._seq:02d}-{label}"
        stdout_path = self.dir / f"{stem}.stdout"
        stderr_path = self.dir / f"{stem}.stderr"
        argv = [
            sys.executable,
            "-m",
            "cronwheel",
            role,
            *([app] if app else []),
            "--store",
            self.store_url,
            *args,
        ]
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            popen = subprocess.Popen(
                argv,
                cwd=self.dir,
                env=self.env(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        proc = Proc(label, popen, stdout_path, stderr_path)
        self.procs.append(proc)
        return proc

    def kill(self, proc: Proc) -> None:
        """SIGKILL the process group and reap the leader (children die with the group)."""
        proc.kill_group(signal.SIGKILL)
        proc.wait(timeout=10)

    def write_lock_free(self) -> bool:
        """Whether the writers' turn (store/sqlite/turn.py) and SQLite's write lock are
        both free right now (each taken and released at once)."""
        with contextlib.ExitStack() as held:
            turn = os.open(str(self.db_path) + TURN_SUFFIX, os.O_RDWR | os.O_CREAT, 0o600)
            held.callback(os.close, turn)
            try:
                fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            conn = sqlite3.connect(self.db_path, timeout=0.2, isolation_level=None)
            held.callback(conn.close)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
                return True
            except sqlite3.OperationalError:
                return False

    def pause(self, proc: Proc, timeout: float = 10) -> None:
        """SIGSTOP ``proc`` at a moment it holds neither the writers' turn nor SQLite's
        write lock.

        A process frozen inside a write transaction blocks every other process on
        the file (a property of SQLite, not of the code under test: the others wait
        for their turn, then time out), so retry until the freeze lands between
        transactions."""
        deadline = time.monotonic() + timeout
        while True:
            os.kill(proc.pid, signal.SIGSTOP)
            if self.write_lock_free():
                return
            os.kill(proc.pid, signal.SIGCONT)
            if time.monotonic() >= deadline:
                raise AssertionError(f"could not pause {proc.name} outside a write transaction")
            time.sleep(0.03)

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.kill_group(signal.SIGKILL)  # SIGKILL also ends a SIGSTOPped process
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    # -- one-shot commands -------------------------------------------------------------
    def cli(
        self, *args: str, store: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "cronwheel", *args]
        if store:
            argv += ["--store", self.store_url]
        return subprocess.run(
            argv,
            cwd=self.dir,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def cli_json(self, *args: str) -> Any:
        result = self.cli(*args, "--json")
        assert result.returncode == 0, (
            f"cronwheel {' '.join(args)} --json exited {result.returncode}: {result.stderr}"
        )
        return json.loads(result.stdout)

    # -- the store, read from the test process ------------------------------------------
    @contextlib.contextmanager
    def store(self) -> Iterator[Any]:
        store = open_store(self.store_url)
        try:
            yield store
        finally:
            store.close()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """A read-only SQL query on the store file (for checks the Store API does not offer)."""
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=10)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table: a snapshot to prove a command changed nothing."""
        if not self.db_path.exists():
            return {}
        tables = [
            r[0]
            for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        ]
        return {t: self.query(f'SELECT * FROM "{t}" ORDER BY rowid') for t in tables}

    # -- the ledger -----------------------------------------------------------------------
    def ledger(self) -> list[dict[str, Any]]:
        return read_ledger(self.ledger_path)

    def diagnostics(self) -> str:
        parts = []
        for proc in self.procs:
            rc = proc.popen.returncode
            parts.append(f"--- {proc.name} (pid {proc.pid}, rc {rc}) stderr tail:\n{proc.tail()}")
        return "\n".join(parts)


_CALL_REPORT = pytest.StashKey[pytest.TestReport]()


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop_all()
        report = request.node.stash.get(_CALL_REPORT, None)
        if report is not None and report.failed:
            print(c.diagnostics())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_CALL_REPORT] = report
    return report
