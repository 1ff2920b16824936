"""Calendars stored by name in a namespace (store/calendar_port.py), on the SQL engines
(queries in core_calendars.sql). Writing one rewrites, in the same transaction, the
schedule copy and the cursor of every job of the namespace that names it."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from cronwheel.domain.calendars import CalendarRecord, CalendarRules, check_stored_name
from cronwheel.domain.jobs import rebind_job
from cronwheel.store import codec
from cronwheel.store.calendar_port import CalendarChange, no_calendar, refuse_in_use
from cronwheel.store.codec import Row
from cronwheel.store.core.dialect import Dialect, Tx
from cronwheel.store.core.quotas import QuotaFlows

D = TypeVar("D", bound=Dialect)


def calendar_from_row(row: Row) -> CalendarRecord:
    rules = row["rules"]
    return CalendarRecord(
        namespace=row["namespace"],
        name=row["name"],
        rules=CalendarRules.from_dict(json.loads(rules) if isinstance(rules, str) else rules),
        updated_at=codec.req_instant(row["updated_at"]),
    )


class CalendarFlows(QuotaFlows[D]):
    """The calendar records, and the re-plan of the jobs naming one."""

    def get_calendar(self, namespace: str, name: str) -> CalendarRecord | None:
        key = {"namespace": namespace, "name": name}
        row = self.db.read(lambda tx: tx.one("calendar_get", key))
        return None if row is None else calendar_from_row(row)

    def list_calendars(self, namespace: str) -> list[CalendarRecord]:
        rows = self.db.read(lambda tx: tx.all("calendar_list", {"namespace": namespace}))
        return [calendar_from_row(r) for r in rows]

    def calendar_jobs(self, namespace: str, name: str) -> list[str]:
        key = {"namespace": namespace, "name": name}
        return [r["name"] for r in self.db.read(lambda tx: tx.all("calendar_job_names", key))]

    def set_calendar(self, namespace: str, name: str, rules: CalendarRules) -> CalendarChange:
        check_stored_name(name)
        params: dict[str, Any] = {
            "namespace": namespace,
            "name": name,
            "rules": json.dumps(rules.to_dict(), sort_keys=True),
        }

        def body(tx: Tx) -> tuple[Row, list[str]]:
            row = tx.one("calendar_set", params)
            assert row is not None
            now = codec.req_instant(row["updated_at"])
            replanned: list[str] = []
            for job_row in tx.all("calendar_jobs", {"namespace": namespace, "name": name}):
                job = codec.job_from_row(job_row)
                change = rebind_job(job, rules, now)
                if change is None:
                    continue
                spec, first = change
                self._check_schedule(tx, spec, first)
                update = codec.job_params(spec) | {"next_fire_at": self._opt_instant(first)}
                tx.one("update_job_spec", update | {"id": job.id})
                replanned.append(job.name)
            if replanned:
                tx.run("bump_jobs_version")
            return row, replanned

        row, replanned = self.db.write(body)
        return CalendarChange(calendar=calendar_from_row(row), replanned=tuple(replanned))

    def delete_calendar(self, namespace: str, name: str) -> None:
        key = {"namespace": namespace, "name": name}

        def body(tx: Tx) -> None:
            users = [r["name"] for r in tx.all("calendar_jobs", key)]
            if users:
                raise refuse_in_use(name, users)
            if tx.one("calendar_delete", key) is None:
                raise no_calendar(namespace, name)

        self.db.write(body)

    def _opt_instant(self, value: Any) -> Any:
        return None if value is None else self.db.instant(value)
