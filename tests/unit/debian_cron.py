"""An emulation of Debian cron's main loop, written from the algorithm of its cron.c.

Debian cron (Vixie cron 3.0 with Debian's patches) keeps three clocks, in
minutes: ``clockTime``, the wall clock (``(time + GMToff) / 60``, where
``GMToff`` is re-read only when the ``isdst`` flag of ``localtime`` changes);
``timeRunning``, the wall minute it woke up for; and ``virtualTime``, the wall
minute whose jobs it last ran. Each time around the loop it sleeps until the next
wall minute, then looks at ``timeDiff = timeRunning - virtualTime``:

- ``1``: the usual case; run the jobs of that minute.
- ``2..5`` ("woke up late"): run every minute's jobs up to now, one minute at a time.
- ``6..180`` (clocks went forward, DST begins): run the *wildcard* jobs of the
  current minute, then the *fixed* jobs of every skipped minute, one by one, up
  to and including the current one.
- ``-179..0`` (clocks went back, DST ends): run only the wildcard jobs of the
  current minute; ``virtualTime`` stays ahead until the wall clock catches up.
- anything else (the clock jumped): reset ``virtualTime`` and run the current minute.

A job is *wildcard* when its minute or its hour field starts with ``*``
(``MIN_STAR``/``HR_STAR`` in entry.c). After a catch-up minute that ran jobs it
sleeps 10 seconds, and the catch-up stops once the wall clock moves on. A job
matches a minute as in ``find_jobs``: minute, hour and month in their sets; the
day if day-of-month AND day-of-week match when either field starts with ``*``,
else if either matches.

Only the 5-field syntax of plain numbers, ``*``, ranges, lists and steps is
parsed here (enough for the vectors); nothing is shared with cronwheel's parser.
Jobs run instantly; the emulation reports the UTC minute each run starts in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

_MINUTE = 60


def _field(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        base, _, step = item.partition("/")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, b = base.split("-")
            first, last = int(a), int(b)
        else:
            first = int(base)
            last = high if step else first
        values.update(range(first, last + 1, int(step) if step else 1))
    return frozenset(values)


@dataclass(frozen=True)
class Entry:
    """One crontab line, as entry.c loads it."""

    source: str
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]
    dom_star: bool
    dow_star: bool
    wild: bool  # MIN_STAR | HR_STAR

    @classmethod
    def parse(cls, line: str) -> Entry:
        minute, hour, dom, month, dow = line.split()
        dows = _field(dow, 0, 7)
        if 7 in dows:
            dows = dows | {0}
        return cls(
            source=line,
            minutes=_field(minute, 0, 59),
            hours=_field(hour, 0, 23),
            doms=_field(dom, 1, 31),
            months=_field(month, 1, 12),
            dows=dows,
            dom_star=dom.startswith("*"),
            dow_star=dow.startswith("*"),
            wild=minute.startswith("*") or hour.startswith("*"),
        )

    def matches(self, vtime: int) -> bool:
        """``find_jobs``' test for wall minute ``vtime`` (minutes since the epoch, as gmtime)."""
        tm = datetime(1970, 1, 1) + timedelta(minutes=vtime)
        wday = (tm.weekday() + 1) % 7  # tm_wday: Sunday = 0
        if self.dom_star or self.dow_star:
            day = tm.day in self.doms and wday in self.dows
        else:
            day = tm.day in self.doms or wday in self.dows
        return (
            tm.minute in self.minutes and tm.hour in self.hours and tm.month in self.months and day
        )


class DebianCron:
    """The daemon's clocks and loop, run against a simulated system clock (UTC seconds)."""

    def __init__(self, zone: ZoneInfo, entries: list[Entry], start: datetime) -> None:
        self.zone = zone
        self.entries = entries
        self.now = int(start.timestamp())
        self.isdst: bool | None = None
        self.gmtoff = 0
        self.clock_time = 0
        self.queue: list[Entry] = []
        self.runs: list[tuple[str, datetime]] = []

    def set_time(self, initialize: bool) -> None:
        local = datetime.fromtimestamp(self.now, UTC).astimezone(self.zone)
        isdst = bool(local.dst())
        if initialize or isdst != self.isdst:
            self.isdst = isdst
            offset = local.utcoffset()
            assert offset is not None
            self.gmtoff = int(offset.total_seconds())
        self.clock_time = (self.now + self.gmtoff) // _MINUTE

    def cron_sleep(self, target: int) -> None:
        seconds_to_wait = target * _MINUTE - (self.now + self.gmtoff) + 1
        if 0 < seconds_to_wait < 65:
            self.now += seconds_to_wait
        else:  # cron_sleep returns at once; the daemon's loop spins while time passes
            self.now += 1

    def find_jobs(self, vtime: int, do_wild: bool, do_nonwild: bool) -> None:
        for entry in self.entries:
            wanted = (do_nonwild and not entry.wild) or (do_wild and entry.wild)
            # job_add keeps one queued copy per entry
            if wanted and entry.matches(vtime) and entry not in self.queue:
                self.queue.append(entry)

    def job_runqueue(self) -> bool:
        ran = bool(self.queue)
        started = datetime.fromtimestamp(self.now - self.now % _MINUTE, UTC)
        self.runs.extend((entry.source, started) for entry in self.queue)
        self.queue.clear()
        return ran

    def run_until(self, end: datetime) -> list[tuple[str, datetime]]:
        """Run the main loop until the system clock passes ``end``; the runs, in order."""
        self.set_time(True)
        time_running = virtual_time = self.clock_time
        stop = int(end.timestamp())
        while self.now < stop:
            while True:
                self.cron_sleep(time_running + 1)
                self.set_time(False)
                if self.clock_time != time_running:
                    break
            time_running = self.clock_time
            time_diff = time_running - virtual_time
            if time_diff == 1:
                virtual_time = time_running
                self.find_jobs(virtual_time, True, True)
            elif 0 < time_diff <= 5:
                while True:
                    if self.job_runqueue():
                        self.now += 10
                    virtual_time += 1
                    self.find_jobs(virtual_time, True, True)
                    if virtual_time >= time_running:
                        break
            elif 5 < time_diff <= 3 * 60:
                self.find_jobs(time_running, True, False)
                while True:
                    if self.job_runqueue():
                        self.now += 10
                    virtual_time += 1
                    self.find_jobs(virtual_time, False, True)
                    self.set_time(False)
                    if not (virtual_time < time_running and self.clock_time == time_running):
                        break
            elif -3 * 60 < time_diff <= 0:
                self.find_jobs(time_running, True, False)
            else:
                virtual_time = time_running
                self.find_jobs(time_running, True, True)
            self.job_runqueue()
        return self.runs
