"""The memory store's calendars (store/calendar_port.py), as the SQL stores keep them:
writing one rewrites the schedule copy and the cursor of every job naming it, under
the store's lock."""

from __future__ import annotations

import json

from cronwheel.domain.calendars import CalendarRecord, CalendarRules, check_stored_name
from cronwheel.domain.jobs import rebind_job
from cronwheel.store import codec
from cronwheel.store.calendar_port import CalendarChange, no_calendar, refuse_in_use
from cronwheel.store.codec import from_us, opt_us
from cronwheel.store.memory.jobs import SPEC_COLUMNS, JobMethods
from cronwheel.store.memory.rows import JobRow, MemoryData


def _names(row: JobRow, name: str) -> bool:
    return bool(json.loads(row.schedule).get("calendar") == name)


class CalendarMethods(JobMethods):
    def get_calendar(self, namespace: str, name: str) -> CalendarRecord | None:
        with self._tx() as data:
            return data.calendars.get((namespace, name))

    def list_calendars(self, namespace: str) -> list[CalendarRecord]:
        with self._tx() as data:
            return [c for (ns, _), c in sorted(data.calendars.items()) if ns == namespace]

    def calendar_jobs(self, namespace: str, name: str) -> list[str]:
        with self._tx() as data:
            return [r.name for r in self._calendar_jobs(data, namespace, name)]

    def set_calendar(self, namespace: str, name: str, rules: CalendarRules) -> CalendarChange:
        check_stored_name(name)
        with self._tx() as data:
            now_us = self._now_us()
            now = from_us(now_us)
            planned = []
            for row in self._calendar_jobs(data, namespace, name):
                job = codec.job_from_row(row)
                change = rebind_job(job, rules, now)
                if change is not None:
                    planned.append((row, *change))
            self._check_schedules(data, [(spec, first) for _, spec, first in planned])
            for row, spec, first in planned:  # every check passed: now change
                params = codec.job_params(spec)
                for key in SPEC_COLUMNS:
                    setattr(row, key, params[key])
                row.next_fire_at = opt_us(first)
                row.updated_at = now_us
            if planned:
                data.jobs_version += 1
            record = CalendarRecord(namespace=namespace, name=name, rules=rules, updated_at=now)
            data.calendars[(namespace, name)] = record
            return CalendarChange(
                calendar=record, replanned=tuple(row.name for row, _, _ in planned)
            )

    def delete_calendar(self, namespace: str, name: str) -> None:
        with self._tx() as data:
            users = [r.name for r in self._calendar_jobs(data, namespace, name)]
            if users:
                raise refuse_in_use(name, users)
            if data.calendars.pop((namespace, name), None) is None:
                raise no_calendar(namespace, name)

    def _calendar_jobs(self, data: MemoryData, namespace: str, name: str) -> list[JobRow]:
        rows = [r for r in data.jobs.values() if r.namespace == namespace and _names(r, name)]
        return sorted(rows, key=lambda r: r.name)
