"""Process roles: scheduler, worker, and the all-in-one ``serve`` supervisor.

Scheduler and workers are separate OS processes (the dispatcher never runs user
code). ``serve`` starts one scheduler and N workers as child processes of the
same Python, restarts a child that dies (with backoff), and on SIGINT/SIGTERM
stops them all gracefully: the leader releases its lease, workers finish what
they run and record it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from cronwheel.app import App
from cronwheel.dispatch.dispatcher import Dispatcher, DispatcherConfig
from cronwheel.domain.clock import StoreClock, sample_clock
from cronwheel.domain.models import NodeInfo
from cronwheel.domain.tzdb import tz_database
from cronwheel.errors import StoreUnavailableError, ValidationError
from cronwheel.observability.sinks import DispatcherSink, WorkerSink
from cronwheel.worker.config import DEFAULT_CONCURRENCY
from cronwheel.worker.waits import store_backoff
from cronwheel.worker.worker import Worker, WorkerConfig

if TYPE_CHECKING:
    from cronwheel.worker.kinds import TaskKinds

log = structlog.get_logger("cronwheel.node")
EXAMPLE_APP = "cronwheel.examples:app"


def load_app(ref: str | None, store_url: str | None) -> App:
    """Import ``module:attribute`` (the built-in example app when ``ref`` is None)."""
    ref = ref or EXAMPLE_APP
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise ValidationError("must look like module:attribute, e.g. myapp:app", field="APP")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValidationError(f"cannot import {module_name!r}: {exc}", field="APP") from None
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise ValidationError(f"{ref!r} is not a cronwheel.App", field="APP")
    app.registry.app_module = module_name
    if store_url:
        app.store_url = store_url
    return app


def load_task_file(app: App, path: str) -> TaskKinds:
    """Register the HTTP and shell tasks of a tasks file (TOML) on ``app``'s registry.

    Raises ValidationError naming the task and field; see ``cronwheel.worker.kinds``.
    """
    from cronwheel.worker.kinds import load_tasks, register_tasks

    return register_tasks(app.registry, load_tasks(path))


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _install_stop_handlers(on_stop: Callable[[], None]) -> None:
    """Call ``on_stop`` (from a watcher thread) on SIGINT/SIGTERM. Call it first, before
    any other thread exists (the store's pool threads inherit the signal mask).

    No Python signal handler is used: one runs in the main thread between two
    bytecodes, possibly while that thread holds the lock ``Event.set()`` needs (in
    ``wait()``, or in a first handler when Ctrl-C and the supervisor's SIGTERM arrive a
    millisecond apart) — a deadlock. Instead the signals are blocked in every thread
    and one thread takes them with ``sigwait``. Blocked signals also cannot kill the
    process during interpreter shutdown when a late second signal arrives.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)

    def watch() -> None:
        while True:
            signal.sigwait(_STOP_SIGNALS)
            on_stop()

    threading.Thread(target=watch, name="cronwheel-signals", daemon=True).start()


def unblock_stop_signals() -> None:
    """Undo an inherited block (a child of ``serve`` starts with its parent's mask)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def run_scheduler(app: App, config: DispatcherConfig | None = None) -> None:
    """Run a dispatcher (leader or standby) until SIGINT/SIGTERM."""
    stop = threading.Event()
    wake: list[Callable[[], None]] = []  # the dispatcher's, once it exists

    def on_stop() -> None:
        stop.set()
        for callback in wake:
            callback()

    _install_stop_handlers(on_stop)
    store = app.store
    for job, changed in app.sync_jobs():
        if changed:
            log.info(
                "job_synced",
                job=job.name,
                schedule=job.spec.schedule.describe(),
                next_fire_at=None if job.next_fire_at is None else job.next_fire_at.isoformat(),
            )
    # the dispatcher acts on the store's clock, as workers do (domain/clock.py): its wheel
    # fires a job `lead` before its instant by the store's time, not this host's
    clock = StoreClock(app.clock)
    _retry_store(lambda: _sample_store_clock(store, clock, 3), stop)
    dispatcher = Dispatcher(store, clock, config=config, events=DispatcherSink())
    tzdb = tz_database()

    wake.append(dispatcher.wake)
    if stop.is_set():
        return
    node = NodeInfo(
        id=dispatcher.holder,
        kind="scheduler",
        hostname=socket.gethostname(),
        pid=os.getpid(),
        started_at=app.clock.now(),
        heartbeat_at=app.clock.now(),
        tz_source=tzdb.source,
        tz_version=tzdb.version,
        clock=clock.estimate() if clock.measured else None,
    )
    _retry_store(lambda: store.register_node(node), stop)
    beat = threading.Thread(target=_node_heartbeat, args=(store, node.id, clock, stop), daemon=True)
    beat.start()
    log.info("scheduler_started", holder=dispatcher.holder)
    gc.freeze()  # as a worker's (run_worker)
    try:
        dispatcher.run(stop)
    finally:
        with contextlib.suppress(StoreUnavailableError):
            store.remove_node(node.id)
        log.info("scheduler_stopped", holder=dispatcher.holder, enqueued=dispatcher.stats.enqueued)


def _sample_store_clock(store: Any, clock: StoreClock, n: int = 1) -> None:
    for _ in range(n):
        clock.add(sample_clock(clock.local, store.now))


def _node_heartbeat(store: Any, node_id: str, clock: StoreClock, stop: threading.Event) -> None:
    """A scheduler's node heartbeat every 2 s, and a round trip to the store's clock
    every second (its dispatcher's clock). A flag is reported (log, node registry); the
    dispatcher keeps its place: it acts on the store's time whatever its host's says."""
    flag: str | None = None
    tick = 0
    while not stop.wait(1.0):
        tick += 1
        try:
            flag = _clock_beat(store, node_id, clock, flag, beat=tick % 2 == 0)
        except StoreUnavailableError as exc:
            log.warning("store_unavailable", error=str(exc))


def _clock_beat(
    store: Any, node_id: str, clock: StoreClock, flag: str | None, *, beat: bool
) -> str | None:
    """One round trip to the store's clock, a change of flag logged, and (``beat``) the
    node's heartbeat with its clock; the flag now."""
    _sample_store_clock(store, clock)
    estimate = clock.estimate()
    if estimate.flag != flag:
        if estimate.flag is None:
            log.info("clock_recovered", node_id=node_id, offset_s=estimate.offset)
        else:
            log.warning("clock_flagged", node_id=node_id, reason=estimate.flag)
    if beat:
        store.heartbeat_node(node_id, estimate)
    return estimate.flag


def _retry_store(fn: Any, stop: threading.Event) -> None:
    """``fn`` retried, after each pause of ``store_backoff``, while the store is
    unavailable, until ``stop``."""
    pauses = store_backoff()
    while not stop.is_set():
        try:
            fn()
            return
        except StoreUnavailableError as exc:
            delay = next(pauses)
            log.warning("store_unavailable", error=str(exc), retry_in_s=delay)
            stop.wait(delay)


def run_worker(
    app: App, config: WorkerConfig | None = None, *, task_kinds: TaskKinds | None = None
) -> None:
    """Run a worker until SIGINT/SIGTERM (then finish running handlers and exit).

    ``task_kinds`` (from ``load_task_file``) is closed (its HTTP client) on the way out.
    """
    hooks = None
    if app.tracing:  # README "Tracing": only then is OpenTelemetry imported
        from cronwheel.observability.tracing import Tracing

        hooks = Tracing()
    worker = Worker(
        app.store, app.registry, app.clock, config=config, events=WorkerSink(), hooks=hooks
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await worker.run(stop)
        finally:
            if task_kinds is not None:
                await task_kinds.aclose()

    # what the process holds by now (modules, the app, the store) is frozen out of the
    # cyclic collector, as in an API process (cli/api_cmd.py): in the peers' herd (W1),
    # a worker's collections took 130-190 ms of its 1.3-2.1 s, 75-105 ms frozen
    gc.freeze()
    asyncio.run(main())


@dataclass(slots=True)
class _Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started: float = 0.0


def serve(
    app_ref: str | None,
    store_url: str,
    *,
    workers: int = 1,
    concurrency: int = DEFAULT_CONCURRENCY,
    log_args: list[str] | None = None,
    tasks_file: str | None = None,
    isolation: str = "auto",
    api_host: str | None = "127.0.0.1",
    api_port: int = 8080,
    api_args: list[str] | None = None,
    metrics_port: int | None = None,
) -> int:
    """Supervise one scheduler, ``workers`` worker processes and (unless ``api_host`` is
    None) an API + dashboard process; return the exit code. With ``metrics_port`` P the
    scheduler serves its metrics on P and worker *i* on P + i."""
    from cronwheel.store.url import require_shared

    require_shared(store_url, "serve")  # its children could never see a memory:// store
    base = [sys.executable, "-m", "cronwheel"]
    common = ["--store", store_url, *(log_args or [])]
    ref = [app_ref] if app_ref else []
    tasks = ["--tasks", os.path.abspath(tasks_file)] if tasks_file else []

    def port_args(offset: int) -> list[str]:
        return [] if metrics_port is None else ["--metrics-port", str(metrics_port + offset)]

    children = [_Child("scheduler", [*base, "scheduler", *common, *port_args(0), *ref])]
    children += [
        _Child(
            f"worker-{i + 1}",
            [
                *base,
                "worker",
                *common,
                "--concurrency",
                str(concurrency),
                "--role",
                f"worker-{i + 1}",
                *port_args(i + 1),
                *tasks,
                "--isolation",
                isolation,
                *ref,
            ],
        )
        for i in range(workers)
    ]
    if api_host is not None:
        api = ["api", *common, "--host", api_host, "--port", str(api_port), *(api_args or [])]
        children.append(_Child("api", [*base, *api]))
    stopping = threading.Event()
    _install_stop_handlers(stopping.set)

    def start(child: _Child) -> None:
        child.proc = subprocess.Popen(child.argv)
        child.started = time.monotonic()
        log.info("process_started", process=child.name, pid=child.proc.pid)

    for child in children:
        start(child)
    while not stopping.wait(0.2):
        for child in children:
            assert child.proc is not None
            code = child.proc.poll()
            if code is None:
                continue
            # A child that ran for a while restarts at once; one that crash-loops backs off.
            quick = time.monotonic() - child.started < 5
            child.restarts = child.restarts + 1 if quick else 0
            delay = min(0.5 * 2**child.restarts, 30.0) if quick else 0.0
            log.warning("process_exited", process=child.name, code=code, restart_in_s=delay)
            if code == 2 and quick:
                # exit code 2 is a usage error: restarting would only repeat it
                stopping.set()
                break
            if stopping.wait(delay):
                break
            start(child)
    for child in children:
        if child.proc is not None and child.proc.poll() is None:
            child.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 35
    code = 0
    for child in children:
        if child.proc is None:
            continue
        try:
            rc = child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.proc.kill()
            rc = child.proc.wait()
        if rc == 2:
            code = 2
    log.info("serve_stopped")
    return code
