"""Rendering for the CLI: rich tables for people, plain dicts for ``--json``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from cronwheel.domain.firing import format_instant
from cronwheel.domain.models import Firing, Job, JobEvent
from cronwheel.observability.tzdata import tz_status
from cronwheel.store.protocol import StoreStatus
from cronwheel.wire import clock_text, node_clock_to_json


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def _ts(v: datetime | None) -> str | None:
    return None if v is None else format_instant(v)


def _tz_of(job: Job) -> str:
    return str(job.spec.schedule.to_dict().get("tz", "UTC"))


def job_dict(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "namespace": job.namespace,
        "name": job.name,
        "task": job.spec.task,
        "schedule": job.spec.schedule.to_dict(),
        "schedule_text": job.spec.schedule.describe(),
        "args": list(job.spec.args),
        "kwargs": job.spec.kwargs,
        "policies": job.spec.policies.to_dict(),
        "paused": job.paused,
        "next_fire_at": _ts(job.next_fire_at),
        "last_fired_at": _ts(job.last_fired_at),
        "missed_total": job.missed_total,
        "created_at": _ts(job.created_at),
        "updated_at": _ts(job.updated_at),
    }


def event_dict(event: JobEvent) -> dict[str, Any]:
    return {
        "at": _ts(event.at),
        "kind": event.kind,
        "first": _ts(event.first_at),
        "last": _ts(event.last_at),
        "count": event.count,
        "exact": event.exact,
        "reason": event.detail,
    }


def upcoming(job: Job, count: int) -> list[dict[str, Any]]:
    """The next ``count`` instants from the job's cursor, in UTC and the job's zone."""
    from cronwheel.domain.schedules import upcoming_instants
    from cronwheel.domain.tz import load_zone

    zone = load_zone(_tz_of(job))
    return [
        {"utc": format_instant(t), "local": t.astimezone(zone).isoformat()}
        for t in upcoming_instants(job.spec.schedule, job.next_fire_at, count)
    ]


def jobs_table(jobs: list[Job]) -> None:
    from rich.table import Table

    table = Table(title=f"{len(jobs)} job(s)", title_justify="left")
    for col in ("id", "name", "task", "schedule", "next firing (UTC)", "state"):
        table.add_column(col, overflow="fold")
    for job in jobs:
        state = "paused" if job.paused else ("done" if job.next_fire_at is None else "active")
        table.add_row(
            str(job.id),
            job.name,
            job.spec.task,
            job.spec.schedule.describe(),
            _ts(job.next_fire_at) or "—",
            state,
        )
    _console().print(table)


def job_detail(
    job: Job, nexts: list[dict[str, Any]], firings: list[Firing], events: list[JobEvent]
) -> None:
    console = _console()
    console.print(f"[bold]{job.name}[/bold]  (id {job.id}, namespace {job.namespace})")
    console.print(f"  task      {job.spec.task}")
    console.print(f"  schedule  {job.spec.schedule.describe()}")
    console.print(
        f"  state     {'paused' if job.paused else 'active'}; "
        f"last fired {_ts(job.last_fired_at) or 'never'}; missed {job.missed_total}"
    )
    p = job.spec.policies
    console.print(
        f"  policies  attempts {p.max_attempts}, misfire {p.misfire.value}, "
        f"visibility {p.visibility_timeout.total_seconds():g}s, priority {p.priority:g}"
    )
    console.print("  upcoming:")
    for n in nexts:
        console.print(f"    {n['local']}   ({n['utc']})")
    if firings:
        firings_table(firings, title="recent firings")
    for e in events:
        console.print(
            f"  {e.kind}: {e.count}{'' if e.exact else '+'} instant(s) "
            f"{_ts(e.first_at)} .. {_ts(e.last_at)} ({e.detail})"
        )


def firings_table(
    firings: list[Firing],
    *,
    title: str | None = None,
    lateness: Mapping[int, timedelta | None] | None = None,
) -> None:
    """``lateness``: a firing's lateness where its row cannot tell (a retried one's)."""
    from rich.table import Table

    table = Table(title=title or f"{len(firings)} firing(s)", title_justify="left")
    for col in ("id", "job", "scheduled for (UTC)", "state", "attempt", "lateness", "worker"):
        table.add_column(col, overflow="fold")
    for f in firings:
        late = lateness[f.id] if lateness and f.id in lateness else f.lateness
        table.add_row(
            str(f.id),
            f.job_name,
            format_instant(f.scheduled_for),
            f.state.value,
            f"{f.attempt}/{f.max_attempts}",
            "—" if late is None else f"{late.total_seconds() * 1000:.1f} ms",
            f.worker_id or "—",
        )
    _console().print(table)


def firing_detail(doc: dict[str, Any]) -> None:
    """A firing's fields (``Firing.to_dict`` plus ``attempts``), then its attempts."""
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    for key, value in doc.items():
        if key == "attempts":
            continue
        if key == "error" and value:
            console.print("error:")
            console.print(str(value), markup=False)
        else:
            console.print(f"{key:16} {value}", markup=False)
    attempts = doc.get("attempts") or []
    if not attempts:
        console.print("attempts         none yet", markup=False)
        return
    table = Table(title=f"{len(attempts)} attempt(s)", title_justify="left")
    for col in ("#", "worker", "claimed (UTC)", "started (UTC)", "finished (UTC)", "outcome"):
        table.add_column(col, overflow="fold")
    table.add_column("error", overflow="fold")
    for a in attempts:
        table.add_row(
            *(
                escape(str(v)) if v is not None else "—"
                for v in (
                    a["attempt"],
                    a["worker_id"],
                    a["claimed_at"],
                    a["started_at"],
                    a["finished_at"],
                    a["outcome"],
                    a["error"],
                )
            )
        )
    console.print(table)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


# the status counts of what is waiting or running now; the others finished in the last hour
_NOW_COUNTS = ("queued", "claimed", "running")


def status_dict(s: StoreStatus) -> dict[str, Any]:
    lease = s.lease
    leader_alive = lease is not None and lease.expires_at > s.now
    return {
        "now": _ts(s.now),
        "leader": lease.holder if leader_alive and lease else None,
        "epoch": lease.epoch if lease else None,
        "lease_expires_at": _ts(lease.expires_at) if lease else None,
        "jobs": s.jobs,
        "paused_jobs": s.paused_jobs,
        # queued: waiting for a claim; claimed: held by a worker, not started
        "queue_depth": s.counts.get("queued", 0),
        "claimed": s.counts.get("claimed", 0),
        "running": s.counts.get("running", 0),
        "last_hour": {k: v for k, v in s.counts.items() if k not in _NOW_COUNTS},
        "oldest_queued_due_at": _ts(s.oldest_queued_due_at),
        "lateness_ms": {
            "count": len(s.lateness_ms),
            "p50": percentile(s.lateness_ms, 50),
            "p99": percentile(s.lateness_ms, 99),
            "max": max(s.lateness_ms) if s.lateness_ms else None,
        },
        "nodes": [
            {
                "id": n.id,
                "kind": n.kind,
                "pid": n.pid,
                "heartbeat_at": _ts(n.heartbeat_at),
                "heartbeat_age_s": round((s.now - n.heartbeat_at).total_seconds(), 1),
                "clock": node_clock_to_json(n.clock),
                "tz_source": n.tz_source,
                "tz_version": n.tz_version,
            }
            for n in s.nodes
        ],
        "tzdata": tz_status(s),
    }


def status_view(doc: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    leader = doc["leader"] or "[red]none (no live leader)[/red]"
    console.print(f"leader  {leader}   epoch {doc['epoch']}")
    console.print(
        f"jobs    {doc['jobs']} ({doc['paused_jobs']} paused)   queue depth "
        f"{doc['queue_depth']} (queued)   claimed {doc['claimed']}   running {doc['running']}"
    )
    late = doc["lateness_ms"]
    if late["count"]:
        console.print(
            f"lateness (last {late['count']} runs)  p50 {late['p50']:.1f} ms   "
            f"p99 {late['p99']:.1f} ms   max {late['max']:.1f} ms"
        )
    if doc["last_hour"]:
        console.print(
            "last hour  " + "   ".join(f"{k} {v}" for k, v in sorted(doc["last_hour"].items()))
        )
    backlog = {k: v for k, v in doc.get("backlog", {}).items() if v}
    if backlog:
        console.print("backlog   " + "   ".join(f"{k} {v}" for k, v in backlog.items()))
    unserved = doc.get("unserved")
    if unserved:
        waiting = "   ".join(f"{task} {n}" for task, n in unserved.items())
        console.print(f"[red]no live worker serves[/red]  {escape(waiting)}  (queued firings)")
    objective = doc.get("lateness_objective")
    if objective:
        objective_view(console, objective)
    quotas_view(console, doc.get("quotas", []))
    retention = doc.get("retention")
    if retention:
        others = len(retention["custom"])
        console.print(
            escape(f"retention ({retention['namespace']})  {retention['policy']}")
            + (f"   ({others} namespaces with their own)" if others else "")
        )
    # one line whatever its length (a path can be long): `status | grep MISMATCH` finds it
    tz = escape(tz_line(doc["tzdata"])).replace("MISMATCH", "[red]MISMATCH[/red]")
    console.print(tz, soft_wrap=True)
    table = Table(title="nodes", title_justify="left")
    for col in ("kind", "id", "pid", "last heartbeat", "tz database", "clock offset"):
        table.add_column(col)
    for n in doc["nodes"]:
        tz = "?" if n["tz_version"] is None else f"{n['tz_version']} ({n['tz_source']})"
        table.add_row(
            n["kind"],
            n["id"],
            str(n["pid"]),
            f"{n['heartbeat_age_s']} s ago",
            escape(tz),
            clock_cell(n),
        )
    console.print(table)


def clock_cell(node: dict[str, Any]) -> str:
    """A node's clock offset to the store's ± its uncertainty; flagged in red."""
    from rich.markup import escape

    clock = node.get("clock")
    text = clock_text(clock)
    if clock is not None and clock["flagged"]:
        return f"[red]{text}  flagged: {escape(clock['flag'])}[/red]"
    return text


def tz_line(tz: dict[str, Any]) -> str:
    """The status line of the cluster's tz database (observability.tzdata.tz_status)."""
    cluster = tz["cluster"]
    shown = (
        "none recorded yet" if cluster is None else f"{cluster['version']} ({cluster['source']})"
    )
    line = f"tz database  {shown}"
    if tz["mismatch"]:
        others = [f"{n['id']} {n['version'] or '?'}" for n in tz["mismatched"]]
        process = tz["process"]
        if cluster is not None and process["version"] != cluster["version"]:
            others.append(f"this process {process['version']}")
        line += "   MISMATCH: " + ", ".join(others)
    return line


def quotas_view(console: Any, quotas: list[dict[str, Any]]) -> None:
    """Each namespace's use of its quotas (used / limit)."""
    from rich.markup import escape
    from rich.table import Table

    if not quotas:
        return
    table = Table(title="quotas (used / limit)", title_justify="left")
    names = ("jobs", "firings_per_minute", "running", "backfill_per_day")
    for col in ("namespace", *names, "min_interval", "skipped"):
        table.add_column(col)
    for q in quotas:
        cells = [f"{q['used'][n]} / {q['limits'][n]}" for n in names]
        ns = escape(q["namespace"]) + ("" if q["custom"] else " (defaults)")
        table.add_row(ns, *cells, q["limits"]["min_interval"], str(q["skipped_firings"]))
    console.print(table)


OBJECTIVE_JOBS_CHECKED = 500


def objective_dict(store: Any, namespace: str) -> dict[str, Any]:
    """Which jobs of ``namespace`` breach the lateness objective (observability.lateness)."""
    from cronwheel.observability.lateness import breaches, objective_ms

    jobs = store.search_jobs(namespace, limit=OBJECTIVE_JOBS_CHECKED)
    goal = objective_ms()
    return {
        "objective_ms": goal,
        "jobs_checked": len(jobs),
        "breaches": [b.to_dict() for b in breaches(store, jobs, objective=goal)],
    }


def objective_view(console: Any, doc: dict[str, Any]) -> None:
    from rich.table import Table
    from rich.text import Text

    goal = f"p99 lateness <= {doc['objective_ms']:g} ms"
    found = doc["breaches"]
    if not found:
        console.print(f"objective {goal}: all {doc['jobs_checked']} job(s) within")
        return
    table = Table(
        title=f"[red]{len(found)} job(s) breach the objective ({goal})[/red]",
        title_justify="left",
    )
    for col in ("job", "p99", "p50", "max", "runs"):
        table.add_column(col, overflow="fold")
    for b in found:
        table.add_row(
            Text(b["job"]),  # a name is data, never rich markup
            f"{b['p99_ms']:.1f} ms",
            f"{b['p50_ms']:.1f} ms",
            f"{b['max_ms']:.1f} ms",
            str(b["samples"]),
        )
    console.print(table)
