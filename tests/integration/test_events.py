"""The dispatcher and the worker report through the events sink they are given."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import structlog

from cronwheel.domain.firing import FiringState
from cronwheel.domain.schedules import cron
from cronwheel.web.ids import ids_for
from tests.integration.conftest import Rig

S = timedelta(seconds=1)


class Recorder:
    """Any event method: records ``(name, args, kwargs)``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> None:
            self.events.append((name, args, kwargs))

        return record

    def named(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(a, k) for n, a, k in self.events if n == name]


def test_dispatcher_reports_its_term_enqueues_and_release(rig: Rig) -> None:
    job = rig.app.schedule("record", cron("*/10 * * * * *"), name="ten-seconds")
    sink = Recorder()
    d = rig.dispatcher(events=sink, lead=timedelta(milliseconds=500))
    rig.run([d], None, until=25 * S)
    d.release()

    assert sink.events[0] == ("lease_acquired", ("node-a", 1), {})
    assert sink.named("lease_renewed")[0] == ((1,), {})
    enqueued = sink.named("firings_enqueued")
    firings = rig.store.list_firings(job_id=job.id)
    assert len(firings) == 2
    assert sum(len(args[0].inserted) for args, _ in enqueued) == len(firings)
    assert {kwargs["epoch"] for _, kwargs in enqueued} == {1}
    assert all(kwargs["lead"] == timedelta(milliseconds=500) for _, kwargs in enqueued)
    assert sink.events[-1] == ("lease_released", ("node-a", 1), {})
    assert not sink.named("lease_lost") and not sink.named("store_unavailable")


def test_worker_reports_claims_starts_and_outcomes(rig: Rig) -> None:
    ok = rig.app.enqueue("record")
    bad = rig.app.enqueue("fail")
    sink = Recorder()
    w = rig.worker(events=sink)
    rig.clock.advance(timedelta(milliseconds=30))
    assert asyncio.run(w.drain_once()) == 2

    [(claims,), _] = sink.named("claimed")[0]
    assert {c.firing.id for c in claims} == {ok.id, bad.id}
    started = {args[0].id: args[1] for args, _ in sink.named("firing_started")}
    assert started == {ok.id: 30.0, bad.id: 30.0}  # the start minus the instant, in ms
    [(succeeded, _)] = sink.named("firing_succeeded")
    assert succeeded[0].id == ok.id and succeeded[1] == 30.0
    [(failed, _)] = sink.named("firing_failed")
    firing, retry_at, error = failed
    assert firing.id == bad.id and error == "ValueError: handler exploded"
    assert rig.store.get_firing(bad.id).state is FiringState.QUEUED  # attempts left: retried
    assert retry_at == rig.store.get_firing(bad.id).due_at
    assert not sink.named("completion_rejected")


def test_a_handler_logs_through_its_context_bound_to_the_firing(rig: Rig) -> None:
    @rig.app.task
    def talk(ctx: Any) -> None:
        ctx.logger.info("said", word="hi")

    firing = rig.app.enqueue("talk")
    with structlog.testing.capture_logs() as logs:
        assert asyncio.run(rig.worker().drain_once()) == 1
    [line] = [entry for entry in logs if entry["event"] == "said"]
    assert line["word"] == "hi" and line["job"] == firing.job_name
    shown = ids_for(rig.store).firing(firing)  # the ids users see, as the API's
    assert line["firing_id"] == shown.id and line["attempt"] == 1
    assert line["idempotency_key"] == shown.idempotency_key
