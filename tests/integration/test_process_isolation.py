"""Process isolation (worker/processes.py): a handler in a child process that can be
killed. Real processes and real time: bounds are generous (a loaded 2-core machine)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.domain.jobs import build_policies
from cronwheel.domain.models import ClaimedFiring, Firing, FiringState, JobSpec
from cronwheel.domain.schedules import NowSchedule
from cronwheel.signals import Cancel, Retry
from cronwheel.store.url import MEMORY_URL, open_store
from cronwheel.worker.context import make_context
from cronwheel.worker.processes import HandlerError, HandlerProcessDied, ProcessRunner
from cronwheel.worker.worker import Worker, WorkerConfig
from tests.integration import proc_tasks
from tests.integration.proc_tasks import app


def lines(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines()]


def enqueue(task: str, kwargs: dict[str, Any] | None = None, **policies: Any) -> Firing:
    spec = JobSpec(
        name=f"{task}@{uuid.uuid4().hex[:8]}",
        task=task,
        schedule=NowSchedule(),
        kwargs=kwargs or {},
        namespace=app.namespace,
        policies=build_policies(**policies),
    )
    return app.store.enqueue_now(spec)


def claim(task: str, **kwargs: Any) -> ClaimedFiring:
    """A fresh memory store, one firing of ``task`` claimed and started."""
    app.use_store(open_store(MEMORY_URL))
    enqueue(task, kwargs)
    [c] = app.store.claim("w", tasks=[task], limit=1)
    assert c.firing.state is FiringState.RUNNING
    return c


class Stops:
    def __init__(self) -> None:
        self.seen: list[tuple[int, str, str, float]] = []

    def __call__(self, firing: Any, reason: str, signal: str, at: float) -> None:
        self.seen.append((firing.id, reason, signal, at))


def run_child(
    c: ClaimedFiring,
    *,
    timeout_s: float | None = None,
    cancel_grace_s: float = 30.0,
    kill_grace: float = 5.0,
    cancel_after: float | None = None,
    stop_after: float | None = None,
    app_module: str | None = None,
) -> tuple[BaseException | None, float, Stops]:
    stops = Stops()
    runner = ProcessRunner(
        kill_grace=timedelta(seconds=kill_grace),
        modules=[proc_tasks.__name__],
        app_module=app_module,
        on_stopped=stops,
    )
    ctx = make_context(c.firing, c.claim_token, "w")
    child = runner.attempt(app.registry.get(c.firing.task), ctx, c.firing)

    async def main() -> BaseException | None:
        loop = asyncio.get_running_loop()
        if cancel_after is not None:
            loop.call_later(cancel_after, ctx.request_cancel)
        if stop_after is not None:
            loop.call_later(stop_after, child.stop, "revoked")
        try:
            await child.run(timeout_s, cancel_grace_s)
        except BaseException as exc:
            return exc
        return None

    t0 = time.monotonic()
    exc = asyncio.run(main())
    assert not runner.children
    return exc, time.monotonic() - t0, stops


def test_the_handler_runs_in_a_child_with_a_working_context(tmp_path: Path) -> None:
    out = tmp_path / "out"
    c = claim("report", out=str(out))
    exc, _, stops = run_child(c)
    assert exc is None
    [seen] = lines(out)
    assert seen["pid"] != os.getpid()
    assert seen["key"] == c.firing.idempotency_key
    assert (seen["firing_id"], seen["attempt"]) == (c.firing.id, 1)
    assert seen["cancel_requested"] is False
    assert stops.seen == []


def test_an_async_handler_runs_in_a_child_too(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exc, _, _ = run_child(claim("areport", out=str(out)))
    assert exc is None
    assert lines(out)[0]["pid"] != os.getpid()


def test_cancel_reaches_the_child_through_the_pipe(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exc, elapsed, stops = run_child(claim("cooperative", out=str(out)), cancel_after=0.5)
    assert isinstance(exc, Cancel) and exc.reason == "asked to stop"
    assert [e["phase"] for e in lines(out)] == ["start", "saw_cancel"]
    assert lines(out)[1]["cancel_requested"] is True
    assert stops.seen == []  # it stopped by itself: no signal
    assert elapsed < 20


def test_a_handler_ignoring_its_cancel_is_killed_when_the_cancel_grace_passes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    c = claim("stubborn", out=str(out))
    exc, elapsed, stops = run_child(c, cancel_after=0.3, cancel_grace_s=0.5)
    assert isinstance(exc, Cancel)
    assert "cancel grace passed" in exc.reason and "SIGTERM" in exc.reason
    [(fid, reason, sig, gone_at)] = stops.seen
    assert (fid, reason, sig) == (c.firing.id, "cancel grace passed", "SIGTERM")
    assert [e["phase"] for e in lines(out)] == ["start"]  # never reached its end
    assert gone_at >= lines(out)[0]["at"] + 0.5
    assert elapsed < 30  # not the handler's 60 s


def test_timeout_kills_the_child_at_the_deadline(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exc, elapsed, stops = run_child(claim("stubborn", out=str(out)), timeout_s=0.8)
    assert isinstance(exc, TimeoutError)
    assert [(r, s) for _, r, s, _ in stops.seen] == [("timeout", "SIGTERM")]
    assert 0.8 <= elapsed < 30
    assert [e["phase"] for e in lines(out)] == ["start"]


def test_sigterm_then_sigkill_after_the_kill_grace(tmp_path: Path) -> None:
    out = tmp_path / "out"
    c = claim("stubborn", out=str(out), ignore_term=True)
    exc, elapsed, stops = run_child(c, stop_after=1.0, kill_grace=1.0)
    assert isinstance(exc, Cancel) and "SIGKILL" in exc.reason
    [(_, reason, sig, gone_at)] = stops.seen
    assert (reason, sig) == ("revoked", "SIGKILL")
    started = lines(out)[0]["at"]
    assert gone_at - started >= 1.0  # SIGTERM was ignored: the grace was waited out
    assert elapsed < 30


def test_a_crashed_child_is_a_failed_attempt(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exc, _, _ = run_child(claim("crash", out=str(out)))
    assert isinstance(exc, HandlerProcessDied)
    assert "killed by SIGKILL" in str(exc)


def test_exceptions_and_signals_come_back_from_the_child() -> None:
    exc, _, _ = run_child(claim("explode"))
    assert isinstance(exc, HandlerError)
    assert "ValueError: boom in the child" in exc.text and "Traceback" in exc.text
    exc, _, _ = run_child(claim("again"))
    assert isinstance(exc, Retry)
    assert exc.after == timedelta(seconds=7) and exc.reason == "not yet"


def test_the_worker_records_outcomes_of_process_isolated_attempts(tmp_path: Path) -> None:
    """Through Worker: a success, a timeout (killed, retried) and a crash (failed)."""
    app.use_store(open_store(MEMORY_URL))
    out = tmp_path / "out"
    ok = enqueue("report", {"out": str(out)})
    slow = enqueue("stubborn", {"out": str(out)}, timeout=0.5)
    worker = Worker(app.store, app.registry, app.clock, config=WorkerConfig(concurrency=4))
    assert asyncio.run(worker.drain_once()) == 2
    good = app.store.get_firing(ok.id)
    assert good is not None and good.state is FiringState.SUCCEEDED
    late = app.store.get_firing(slow.id)
    assert late is not None
    assert late.state is FiringState.QUEUED and late.error is not None
    assert "timed out after 0.5 s" in late.error


def test_the_worker_default_isolation_applies_to_tasks_without_one(tmp_path: Path) -> None:
    app.use_store(open_store(MEMORY_URL))
    out = tmp_path / "out"
    enqueue("plain", {"out": str(out)})
    config = WorkerConfig(isolation="process")
    asyncio.run(Worker(app.store, app.registry, app.clock, config=config).drain_once())
    assert lines(out)[0]["pid"] != os.getpid()
    enqueue("plain", {"out": str(out)})
    asyncio.run(Worker(app.store, app.registry, app.clock).drain_once())
    assert lines(out)[1]["pid"] == os.getpid()  # "auto": a thread of the worker


@pytest.mark.parametrize(
    ("value", "is_async"), [("loop", False), ("thread", True), ("fork", False)]
)
def test_a_wrong_isolation_names_the_field(value: str, is_async: bool) -> None:
    from cronwheel import App
    from cronwheel.errors import ValidationError

    other = App("memory://")

    async def ahandler(ctx: Any) -> None: ...

    def handler(ctx: Any) -> None: ...

    with pytest.raises(ValidationError) as info:
        other.task(isolation=value)(ahandler if is_async else handler)
    assert info.value.field == "isolation"
    assert not other.registry.names()


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's zombie may wait for init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in {"Z", "X"}


def test_a_child_does_not_outlive_its_worker(tmp_path: Path) -> None:
    """A worker process SIGKILLed mid-attempt: its child sees its pipe close and exits."""
    import signal
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'cw.db'}"
    app.use_store(open_store(url))
    out = tmp_path / "out"
    enqueue("stubborn", {"out": str(out)})
    root = Path(__file__).resolve().parents[2]
    argv = ["-m", "cronwheel", "worker", "tests.integration.proc_tasks:app", "--store", url]
    worker = subprocess.Popen(
        [sys.executable, *argv],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not lines(out):
            assert time.monotonic() < deadline, "the handler never started"
            assert worker.poll() is None, "the worker died"
            time.sleep(0.05)
        child = lines(out)[0]["pid"]
        assert child != worker.pid and _running(child)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        deadline = time.monotonic() + 10
        while _running(child):
            assert time.monotonic() < deadline, "the child outlived its worker by 10 s"
            time.sleep(0.02)
    finally:
        app.store.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)


def test_an_outcome_larger_than_the_pipe_buffer_comes_back_bounded() -> None:
    exc, elapsed, _ = run_child(claim("loud"))
    assert isinstance(exc, Cancel)
    assert exc.reason == "x" * 8000
    assert elapsed < 30


@pytest.mark.parametrize("task", ["overrun", "adeaf"])
def test_in_process_handlers_past_their_timeout_hold_back_the_next_attempt(
    task: str, tmp_path: Path
) -> None:
    """A thread (or a coroutine deaf to its cancellation) cannot be killed: the retry of
    a timed-out firing (same job, same worker) starts only once the first attempt's
    code has returned."""
    app.use_store(open_store(MEMORY_URL))
    out = tmp_path / "out"
    firing = enqueue(task, {"out": str(out)}, timeout=0.3, retry_backoff=0.05)
    worker = Worker(app.store, app.registry, app.clock)

    async def main() -> None:
        assert await worker.drain_once() == 1  # attempt 1 times out; its code runs on
        give_up = time.monotonic() + 10
        while await worker.drain_once() == 0:  # attempt 2, once its backoff has passed
            assert time.monotonic() < give_up
            await asyncio.sleep(0.05)

    asyncio.run(main())
    seen = lines(out)
    # (attempt 2 times out as well; its code ends after the test)
    phases = [(e["phase"], e["attempt"]) for e in seen[:3]]
    assert phases == [("start", 1), ("end", 1), ("start", 2)]
    assert seen[2]["at"] >= seen[1]["at"]
    after = app.store.get_firing(firing.id)
    assert after.attempt == 2 and after.error is not None and "timed out" in after.error


def test_a_task_defined_away_from_its_app_is_found_through_the_app_module(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    exc, _, _ = run_child(claim("borrowed", out=str(out)))
    assert isinstance(exc, HandlerError)
    assert "'borrowed' is not registered by any App of tests.integration.proc_helpers" in exc.text
    exc, _, _ = run_child(claim("borrowed", out=str(out)), app_module=proc_tasks.__name__)
    assert exc is None
    assert lines(out)[0]["pid"] != os.getpid()


def test_load_app_records_the_app_module() -> None:
    from cronwheel.node import load_app

    loaded = load_app("tests.integration.proc_tasks:app", None)
    assert loaded is app and app.registry.app_module == "tests.integration.proc_tasks"


def test_a_thread_outliving_its_event_loop_still_ends_its_turn(tmp_path: Path) -> None:
    """A worker driven by one ``asyncio.run`` per ``drain_once`` (a user's test): the
    thread of a timed-out attempt returns after its loop is gone; the retry, on the next
    loop, waits for it and then runs (it is not held back forever)."""
    app.use_store(open_store(MEMORY_URL))
    out = tmp_path / "out"
    enqueue("overrun", {"out": str(out), "seconds": 1.0}, timeout=0.3, retry_backoff=0.05)
    worker = Worker(app.store, app.registry, app.clock)
    assert asyncio.run(worker.drain_once()) == 1
    give_up = time.monotonic() + 15
    while asyncio.run(asyncio.wait_for(worker.drain_once(), 15)) == 0:
        assert time.monotonic() < give_up
        time.sleep(0.05)
    seen = lines(out)
    phases = [(e["phase"], e["attempt"]) for e in seen[:3]]
    assert phases == [("start", 1), ("end", 1), ("start", 2)]
