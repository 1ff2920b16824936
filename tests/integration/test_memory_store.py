"""What a user's own test does with App("memory://"): register a task, schedule a cron
job, advance a fake clock, run the dispatcher and a worker once, assert the handler
ran. The README's "Testing your tasks" example is run here too, as pasted."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cronwheel import App, Context, FakeClock, FiringState, cron
from cronwheel.dispatch.dispatcher import Dispatcher
from cronwheel.store.memory import MemoryStore
from cronwheel.worker.worker import Worker

README = Path(__file__).resolve().parents[2] / "README.md"


def test_a_cron_job_runs_its_handler_on_a_fake_clock() -> None:
    clock = FakeClock(datetime(2026, 3, 2, 6, 59, tzinfo=UTC))  # a Monday
    app = App("memory://", clock=clock)
    sent: list[tuple[str, datetime, int]] = []

    @app.task(retries=1, retry_backoff=10)
    def send_digest(ctx: Context, team: str) -> None:
        sent.append((team, ctx.scheduled_for, ctx.attempt))
        if ctx.attempt == 1:
            raise RuntimeError("mail server down")

    job = app.schedule(send_digest, cron("0 7 * * mon-fri"), kwargs={"team": "ops"})
    assert isinstance(app.store, MemoryStore)
    dispatcher = Dispatcher(app.store, clock)
    worker = Worker(app.store, app.registry, clock)

    def run(seconds: int) -> int:
        ran = 0
        for _ in range(seconds):
            clock.advance(timedelta(seconds=1))
            dispatcher.step()
            ran += asyncio.run(worker.drain_once())
        return ran

    assert run(59) == 0  # until 06:59:59: nothing due
    assert run(1) == 1  # 07:00: runs, fails
    (firing,) = app.store.list_firings(job_id=job.id)
    assert firing.state is FiringState.QUEUED and "mail server down" in (firing.error or "")
    assert run(10) == 1  # the retry, after its backoff (at most 10 s), succeeds
    seven = datetime(2026, 3, 2, 7, 0, tzinfo=UTC)
    assert sent == [("ops", seven, 1), ("ops", seven, 2)]
    assert app.store.get_firing(firing.id).state is FiringState.SUCCEEDED
    assert app.store.get_job_by_id(job.id).next_fire_at == seven + timedelta(days=1)


def test_the_readme_example_runs_as_pasted() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Testing your tasks", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the section has one example"
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], "README.md#testing-your-tasks", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_") and callable(f)]
    assert len(tests) == 1
    tests[0]()
