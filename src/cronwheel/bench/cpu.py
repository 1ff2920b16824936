"""CPU seconds of processes of this host, read from /proc: what the benchmarks charge
to each side of a workload (the API, the workers, the PostgreSQL server, wrk)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from subprocess import Popen


def tree(root: int) -> list[int]:
    """``root`` and its descendants (from /proc; just ``root`` elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return [root]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def on_this_host(url: str) -> bool:
    """Whether the PostgreSQL server of ``url`` runs on this host (a loopback address or
    a Unix socket, and ``postgres`` processes to read)."""
    from psycopg.conninfo import conninfo_to_dict

    host = str(conninfo_to_dict(url).get("host") or "")
    local = host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")
    return local and bool(postgres_pids())


def postgres_pids() -> list[int]:
    """The pids of this host's ``postgres`` processes (none without /proc)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    out = []
    for entry in entries:
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == "postgres":
                    out.append(int(entry))
            except OSError:
                continue
    return out


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds of each of ``pids`` still running."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """The CPU spent between two readings: a process started in between counts whole;
    one that ended in between is lost (a backend's exit is rare in a row)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


class SideMeter:
    """CPU seconds of each side of a workload (a name: a function listing its pids, read
    at each reading, so that processes started meanwhile count), between two readings."""

    def __init__(self, sides: dict[str, Callable[[], list[int]]]) -> None:
        self._sides = sides

    @classmethod
    def of_processes(
        cls, workers: Sequence[Popen[bytes]], schedulers: Sequence[Popen[bytes]], *, server: bool
    ) -> SideMeter:
        """A drain's sides: its worker processes, its schedulers (each with its children),
        and with ``server`` every ``postgres`` process of this host (a benchmark's own
        reads included)."""
        sides: dict[str, Callable[[], list[int]]] = {
            "workers": lambda: [pid for p in workers for pid in tree(p.pid)],
            "scheduler": lambda: [pid for p in schedulers for pid in tree(p.pid)],
        }
        if server:
            sides["server"] = postgres_pids
        return cls(sides)

    def read(self) -> dict[str, dict[int, float]]:
        return {name: cpu_by_pid(pids()) for name, pids in self._sides.items()}

    @staticmethod
    def per_item(
        before: dict[str, dict[int, float]], after: dict[str, dict[int, float]], items: int
    ) -> dict[str, int]:
        """Microseconds of CPU of each side per item (``items`` done between the two
        readings), and their sum (``machine``)."""
        if items <= 0:
            return {}
        out = {
            name: round(cpu_delta(before.get(name, {}), now) * 1e6 / items)
            for name, now in after.items()
        }
        out["machine"] = sum(out.values())
        return out
