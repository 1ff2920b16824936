"""Node clocks (issue 18, item 5): processes under a shifted clock (Debian's `faketime`,
libfaketime) start firings at their instants in REAL time.

A worker 3 s behind or ahead (and, in the third case, a scheduler 3 s behind too) runs
against PostgreSQL beside a control worker (under faketime too, at +0s: libfaketime
costs CPU on every clock read) that serves the same instants. Each handler's start is
measured in REAL time by the test process: the handler sends a timestamp-free UDP
datagram, the kernel stamps its arrival (SO_TIMESTAMPNS; clock_app.py). Not the
store's ``started_at``: a completion rewrites it with the worker's own reading of the
start. Then a worker
whose offset passes its bound (``--max-clock-offset 1``) is flagged in the node
registry and claims nothing, and recovers when its clock is fixed.

libfaketime settings: ``FAKETIME_DONT_FAKE_MONOTONIC=1`` keeps CLOCK_MONOTONIC real. With
it faked, Python's timed waits (``threading.Event.wait``: a kernel deadline on the real
monotonic clock computed from the faked one) never return. (libfaketime 0.9.10's
``clock_nanosleep`` then fails with EINVAL, i.e. ``time.sleep``; the worker's path does
not sleep that way: asyncio and Event waits do.)
"""

from __future__ import annotations

import glob
import re
import shutil
import socket
import struct
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel import at
from cronwheel.domain.models import JobSpec
from tests.conftest import require_service
from tests.faults.clock_app import PING_ENV
from tests.faults.harness import Cluster, wait_until

pytestmark = pytest.mark.slow

# the shifted worker's median lateness within this of the control's, measured over the
# same instants at the same moment: a correction off by more shows here. (Seen in 9 runs
# of 3 cases: the medians 0.1-5 ms apart. The p99s are the crowd of 10 at one instant,
# where the two workers race for the 2 cores: one p99 of 229 ms beside a control's 80 ms
# failed a p99 bound of 150 ms once, with both medians near 17 ms.)
MEDIAN_APART_S = 0.050
EARLY_S = 0.005  # the offset is known to within half a round trip (well under 1 ms here)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python may lack it
KEEP_MONOTONIC = {"FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def _faketime() -> list[str]:
    path = shutil.which("faketime")
    if path is None:
        require_service("faketime (apt-get install faketime)", FileNotFoundError("faketime"))
    return [str(path)]


def _libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        require_service("libfaketime (apt-get install faketime)", FileNotFoundError("lib"))
    return found[0]


def _node_clock(cluster: Cluster, kind: str, task: str | None = None) -> dict[str, Any] | None:
    """What the scheduler, or the worker serving ``task``, reports of its clock. (By kind
    and task: under `faketime` the process started is the wrapper, so its pid is not the
    node's.)"""
    rows = cluster.sql(
        "SELECT clock_offset, clock_uncertainty, clock_flag FROM nodes WHERE kind = %s"
        " AND (%s::text IS NULL OR info->'tasks' ? %s) AND clock_offset IS NOT NULL",
        (kind, task, task),
    )
    return rows[0] if rows else None


def _wait_clock(
    cluster: Cluster, offset: float, kind: str = "worker", task: str | None = None
) -> dict[str, Any]:
    """Until that node reports an offset within 20 ms of ``offset`` (its own measure),
    known to within 20 ms. Its first samples are taken while the cluster's processes
    start on the 2 cores, and a slow round trip makes a loose one; it keeps the tightest
    of its samples (one a second), so it converges or the wait fails."""

    def near() -> dict[str, Any] | None:
        row = _node_clock(cluster, kind, task)
        if row is None or abs(row["clock_offset"] - offset) >= 0.02:
            return None
        return row if row["clock_uncertainty"] < 0.02 else None

    row = wait_until(
        near,
        15,
        message=lambda: f"{kind} {task}: ~{offset:+} s: {_node_clock(cluster, kind, task)}",
    )
    assert row is not None
    return row


def _lateness(pings: Pings, due: dict[str, datetime], task: str) -> list[float]:
    """Each started firing of ``task``: its handler's start (received) minus its instant."""
    return sorted(
        at - due[name].timestamp()
        for name, at in list(pings.seen.items())
        if name.startswith(task) and name in due
    )


def _quiet(cluster: Cluster) -> None:
    """No lease sampling (a query every 20 ms): these tests measure latency, not epochs."""
    if cluster.sampler is not None:
        cluster.sampler.stop()
        cluster.sampler = None


class Pings:
    """Receives the handlers' datagrams (clock_app.py) and keeps each job's first one's
    arrival instant as the kernel stamped it (SO_TIMESTAMPNS): the real clock, and not
    delayed by this process waiting for a CPU on a loaded machine."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pings", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stamp = struct.Struct("@qq")  # struct timespec
        while not self._stop.is_set():
            try:
                data, ancillary, _, _ = self.sock.recvmsg(256, socket.CMSG_SPACE(stamp.size))
            except TimeoutError:
                continue
            at = time.time()  # only if the kernel gave no stamp
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = stamp.unpack(value[: stamp.size])
                    at = sec + nsec / 1e9
            self.seen.setdefault(data.decode(), at)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def _p99(values: list[float]) -> float:
    return values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("worker_shift", "scheduler_shift"),
    [("-3s", None), ("+3s", None), ("+3s", "-3s")],
    ids=["worker-behind", "worker-ahead", "both-off"],
)
def test_shifted_clocks_start_firings_at_their_instants(
    cluster: Cluster, worker_shift: str, scheduler_shift: str | None, request: Any
) -> None:
    faketime = _faketime()
    shift_s = float(worker_shift.rstrip("s"))
    _quiet(cluster)
    pings = Pings()
    request.addfinalizer(pings.close)
    env = KEEP_MONOTONIC | {PING_ENV: pings.address}
    sched_wrap = None if scheduler_shift is None else [*faketime, "-f", scheduler_shift]
    scheduler = cluster.start_scheduler(wrap=sched_wrap, env_extra=KEEP_MONOTONIC)
    shifted = cluster.start_worker(
        "shifted",
        wrap=[*faketime, "-f", worker_shift],
        env_extra=env,
        concurrency=16,
        app_ref="clock_app:shifted",
    )
    # the control: the same instants, a worker under faketime too (libfaketime costs CPU
    # on every clock read), but on the host's clock
    control = cluster.start_worker(
        "control",
        wrap=[*faketime, "-f", "+0s"],
        env_extra=env,
        concurrency=16,
        app_ref="clock_app:control",
    )
    cluster.wait_started([scheduler, shifted, control])
    # its offset: the store's clock minus its own (NTP's sign), as the registry shows it
    clock = _wait_clock(cluster, -shift_s, task="on_shifted")
    assert clock["clock_flag"] is None and clock["clock_uncertainty"] < 0.02
    if scheduler_shift is not None:
        _wait_clock(cluster, -float(scheduler_shift.rstrip("s")), kind="scheduler")
    # a leader (by the lease row: under faketime the pid started is the wrapper's)
    wait_until(lambda: (cluster.lease() or {}).get("valid"), 15, message="a leader")
    # for each worker: 80 instants 50 ms apart and a crowd of 10 at one, from 3 s from
    # now (real time), registered at once, well before (the leader enqueues 0.5 s ahead);
    # and 5 not measured 1 s before (a worker's first starts open its connections)
    base = datetime.now(UTC) + timedelta(seconds=3)
    instants = [base + timedelta(milliseconds=50 * i) for i in range(80)]
    instants += [base + timedelta(seconds=4.2)] * 10
    warm = [base - timedelta(seconds=1)] * 5
    due = {f"{t}{i}": when for t in ("on_shifted", "on_control") for i, when in enumerate(instants)}
    cluster.client.store.create_jobs(
        [
            (JobSpec(name=name, task=name.rstrip("0123456789"), schedule=at(when)), when)
            for name, when in due.items()
        ]
        + [
            (JobSpec(name=f"warm_{t}{i}", task=t, schedule=at(when)), when)
            for t in ("on_shifted", "on_control")
            for i, when in enumerate(warm)
        ]
    )
    assert datetime.now(UTC) < base - timedelta(seconds=1.5), "registering took too long"
    wait_until(
        lambda: len([n for n in list(pings.seen) if n in due]) == len(due),
        20,
        interval=0.5,  # the test's own polling is load on the 2 cores it measures
        message=lambda: f"every firing to start: {len(pings.seen)} of {len(due)}",
    )
    late = _lateness(pings, due, "on_shifted")
    ctl = _lateness(pings, due, "on_control")
    cluster.figures.update(
        {
            "worker_shift": worker_shift,
            "scheduler_shift": scheduler_shift,
            "offset_measured_s": clock["clock_offset"],
            "uncertainty_ms": round(clock["clock_uncertainty"] * 1000, 3),
        }
        | {
            f"{who}_lateness_ms_{k}": round(v * 1000, 2)
            for who, values in (("shifted", late), ("control", ctl))
            for k, v in (
                ("min", values[0]),
                ("p50", values[len(values) // 2]),
                ("p99", _p99(values)),
                ("max", values[-1]),
            )
        }
    )
    assert late[0] >= -EARLY_S, late[:5]
    # Whatever the load: none early, and every start far from the 3 s error (without the
    # correction the worker 3 s behind started every firing >= 3.0 s late, the one 3 s
    # ahead up to 0.46 s early); and as precise as the control, on the host's clock, over
    # the same instants at the same moment.
    median = late[len(late) // 2]
    assert median < 1.0, (median, late[-5:])
    assert _p99(late) < 2.5, late[-5:]
    ctl_median = ctl[len(ctl) // 2]
    assert abs(median - ctl_median) < MEDIAN_APART_S, (median, ctl_median)
    for proc in (shifted, control):
        assert proc.alive() and proc.tracebacks() == 0, proc.lines()[-20:]


@pytest.mark.timeout(90)
def test_a_worker_off_by_more_than_its_bound_is_flagged_claims_nothing_and_recovers(
    cluster: Cluster, tmp_path: Path
) -> None:
    lib = _libfaketime()
    _quiet(cluster)
    shift = tmp_path / "faketime.txt"  # libfaketime rereads it: the operator fixes NTP
    shift.write_text("+3s\n")
    scheduler = cluster.start_scheduler()
    worker = cluster.start_worker(
        args=["--max-clock-offset", "1"],
        env_extra={
            **KEEP_MONOTONIC,
            "LD_PRELOAD": lib,
            "FAKETIME_TIMESTAMP_FILE": str(shift),
            "FAKETIME_CACHE_DURATION": "1",
        },
    )
    cluster.wait_started([scheduler, worker])
    flagged = _wait_clock(cluster, -3.0)
    flag = flagged["clock_flag"] or ""
    # the offset (about -3 s: _wait_clock) is past the bound, and the flag says so
    assert re.fullmatch(r"clock offset -[23]\.\d{3} s is beyond ±1 s", flag), flagged
    assert worker.events("clock_flagged"), worker.lines()[-20:]
    when = datetime.now(UTC) + timedelta(seconds=0.5)
    cluster.one_shot("flagged", when)
    # enqueued (the scheduler is fine), but the flagged worker claims nothing
    wait_until(
        lambda: cluster.sql("SELECT state FROM firings")[0:1] == [{"state": "queued"}],
        10,
        message="the firing to be queued",
    )
    time.sleep(2.0)  # its instant passed 1.5 s ago: a worker that claimed would have run it
    assert cluster.sql("SELECT state FROM firings") == [{"state": "queued"}]
    shift.write_text("+0s\n")  # fixed
    fixed_at = time.monotonic()
    recovered = _wait_clock(cluster, 0.0)
    assert recovered["clock_flag"] is None
    wait_until(
        lambda: cluster.sql("SELECT state FROM firings") == [{"state": "succeeded"}],
        10,
        message="the firing to run once the worker recovered",
    )
    cluster.figures["recovered_and_ran_s"] = round(time.monotonic() - fixed_at, 2)
    assert worker.events("clock_recovered"), worker.lines()[-20:]
    assert worker.tracebacks() == 0, worker.lines()[-20:]
