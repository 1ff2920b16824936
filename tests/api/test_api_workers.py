"""``cronwheel api --workers 2`` on Linux: the supervisor and its SO_REUSEPORT children.

Which child serves a connection is observed from outside, honestly: the children are
the supervisor's child processes (``/proc/*/stat``), and a connection belongs to the
child holding its socket (the inode of each ESTABLISHED ``/proc/net/tcp`` row on the
port, matched against ``/proc/<child>/fd``). No test-only header or endpoint.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cronwheel.cli import api_workers
from tests.api.test_cli import run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not api_workers.reuse_port_supported(), reason="Linux SO_REUSEPORT"),
]

WAIT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _until(what: str, check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _connections_by_child(children: set[int], port: int) -> dict[int, int]:
    """ESTABLISHED server-side connections on ``port`` held by each child."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "01":  # 01: ESTABLISHED
                inodes.add(fields[9])
    counts = {}
    for pid in children:
        held = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                held += 1
        counts[pid] = held
    return counts


def _get(sock: socket.socket, port: int) -> bytes:
    """GET /readyz on a keep-alive connection; the status line."""
    sock.sendall(f"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before an answer"
        data += chunk
    return data.split(b"\r\n", 1)[0]


def _open_and_ask(port: int, n: int) -> list[socket.socket]:
    """``n`` fresh connections, each answered once and kept open."""
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            socks.append(s)
            assert _get(s, port) == b"HTTP/1.1 200 OK"
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


class Api:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    def children(self) -> set[int]:
        return _children(self.proc.pid)

    def serving_children(self, n: int = 40) -> dict[int, int]:
        """Open ``n`` fresh connections, all answered; the connections each child holds."""
        socks = _open_and_ask(self.port, n)
        try:
            children = self.children()
            counts = _connections_by_child(children, self.port)
            assert sum(counts.values()) == n, (counts, self.log.read_text())
            return counts
        finally:
            for s in socks:
                s.close()


@pytest.fixture
def api2(tmp_path: Path) -> Iterator[Api]:
    port = _free_port()
    log = tmp_path / "api.log"
    argv = [sys.executable, "-m", "cronwheel", "api", "--store", f"sqlite:///{tmp_path}/a.db"]
    argv += ["--port", str(port), "--workers", "2"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    api = Api(proc, port, log)
    try:
        _until("two children", lambda: len(api.children()) == 2 or proc.poll() is not None)
        assert proc.poll() is None, log.read_text()

        def ready() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    return _get(s, port) == b"HTTP/1.1 200 OK"
            except OSError:
                return False

        _until("/readyz", ready)
        yield api
    finally:
        if proc.poll() is None:
            proc.kill()  # the test failed: don't leave the children behind
            for pid in _children(proc.pid):
                os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=WAIT_S)


def test_both_children_serve_fresh_connections(api2: Api) -> None:
    counts = api2.serving_children(40)
    assert len(counts) == 2 and all(n > 0 for n in counts.values()), counts


def test_sigterm_stops_every_child_exit_0_and_frees_the_port(api2: Api) -> None:
    children = api2.children()
    api2.proc.send_signal(signal.SIGTERM)
    assert api2.proc.wait(timeout=WAIT_S) == 0, api2.log.read_text()
    _until("the children gone", lambda: not any(_alive(pid) for pid in children))
    with socket.socket() as s:
        s.bind(("127.0.0.1", api2.port))  # no SO_REUSEADDR/PORT: nothing holds it
        s.listen()
    assert "api_stopped" in api2.log.read_text()


def test_a_killed_child_is_replaced_and_the_port_keeps_answering(api2: Api) -> None:
    victim, survivor = sorted(api2.children())
    os.kill(victim, signal.SIGKILL)
    _until("a replacement", lambda: victim not in api2.children())
    api2.serving_children(10)  # the survivor answers meanwhile (or the replacement)
    _until("two children again", lambda: len(api2.children()) == 2)
    (new,) = api2.children() - {survivor}

    def new_one_serves() -> bool:
        try:
            return api2.serving_children(40).get(new, 0) > 0
        except (OSError, AssertionError):
            return False  # the replacement may still be starting: its port not yet open

    _until("the replacement serving", new_one_serves)
    counts = api2.serving_children(40)
    assert set(counts) == {survivor, new} and all(counts.values()), counts
    log = api2.log.read_text()
    assert "api_process_exited" in log and f"pid={victim}" in log


@pytest.mark.parametrize("reuse_port", [False, True])
def test_port_in_use_is_one_line_and_exit_2(
    reuse_port: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Taken by a plain listener, or by one with SO_REUSEPORT that the children could
    otherwise have joined silently (another ``cronwheel api --workers`` there)."""
    with socket.socket() as taken:
        if reuse_port:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["api", "--store", f"sqlite:///{tmp_path}/a.db", "--port", str(port)]
        code, out, err = run([*argv, "--workers", "2"], capsys)
    assert code == 2 and not out
    assert err.count("\n") == 1 and f"127.0.0.1:{port}" in err and "--port" in err, err
    assert "in use" in err


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    def _add(self, event: str, **kw: object) -> None:
        self.events.append((event, kw))

    info = warning = error = _add


@pytest.mark.parametrize(("child_code", "expected"), [(1, 1), (2, 2)])
def test_children_crashing_at_start_end_the_supervisor(child_code: int, expected: int) -> None:
    """Exit 1 after MAX_QUICK_EXITS quick deaths in a row (restarted in between, with
    a doubling delay); exit 2 (a usage error) at once, without a restart."""
    log = _Log()
    argv = [sys.executable, "-c", f"raise SystemExit({child_code})"]
    started = time.monotonic()
    code = api_workers.supervise(2, argv, dict(os.environ), log=log, first_backoff_s=0.01)
    assert code == expected
    assert time.monotonic() - started < WAIT_S
    names = [e for e, _ in log.events]
    assert names[-1] == "api_stopped"
    if expected == 1:
        assert "api_processes_crashing" in names
        restarts = [kw for e, kw in log.events if e == "api_process_exited"]
        delays = [[kw["restart_in_s"] for kw in restarts if kw["process"] == i] for i in (1, 2)]
        assert max(delays, key=len) == [0.01, 0.02, 0.04, 0.08]  # then it gave up
    else:
        assert "api_process_failed" in names and "api_process_exited" not in names


def test_children_of_a_killed_supervisor_stop_themselves(api2: Api) -> None:
    children = api2.children()
    api2.proc.kill()
    api2.proc.wait(timeout=WAIT_S)
    _until("the orphaned children gone", lambda: not any(_alive(pid) for pid in children))
    with socket.socket() as s:
        s.bind(("127.0.0.1", api2.port))
