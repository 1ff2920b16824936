"""The writers' turn at a SQLite file (store/sqlite/turn.py): each write transaction of
a store holds an flock on ``<database>-lock``; a writer that finds it taken waits in
the kernel (by a helper thread, on a descriptor of its own) for at most the store's
turn timeout, and a turn given up on is let go once granted."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from cronwheel.errors import StoreUnavailableError
from cronwheel.store.sqlite.store import SqliteStore
from cronwheel.store.sqlite.turn import SUFFIX
from tests.forked import exit_code, fork, running

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="flock and fork: POSIX")


@pytest.fixture
def path(tmp_path: Path) -> str:
    db = str(tmp_path / "turn.db")
    store = SqliteStore(db)
    store.migrate()
    store.db.write(lambda tx: tx.conn.execute("CREATE TABLE marks (who TEXT)"))
    store.close()
    return db


def mark(store: SqliteStore, who: str) -> None:
    store.db.write(lambda tx: tx.conn.execute("INSERT INTO marks VALUES (?)", (who,)))


def marks(store: SqliteStore) -> list[str]:
    return [r[0] for r in store.db.read(lambda tx: tx.conn.execute("SELECT who FROM marks"))]


def turn_free(path: str) -> bool:
    """Whether another holder (a descriptor of its own) could take the turn now."""
    fd = os.open(path + SUFFIX, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def test_a_write_transaction_holds_the_turn_and_lets_it_go(path: str) -> None:
    store = SqliteStore(path)
    seen: list[bool] = []
    store.db.write(lambda tx: seen.append(turn_free(path)))
    assert seen == [False]
    assert turn_free(path)
    with pytest.raises(ZeroDivisionError):  # a failed body lets the turn go too
        store.db.write(lambda tx: 1 // 0)
    assert turn_free(path)
    store.close()


def test_a_waiting_writer_gets_the_turn_when_the_holder_commits(path: str) -> None:
    first, second = SqliteStore(path), SqliteStore(path)
    inside, release = threading.Event(), threading.Event()

    def held_write() -> None:
        def body(tx: object) -> None:
            inside.set()
            assert release.wait(10)
            first.db.conn.execute("INSERT INTO marks VALUES ('first')")

        first.db.write(body)

    holder = threading.Thread(target=held_write)
    holder.start()
    assert inside.wait(10)
    waiter = threading.Thread(target=mark, args=(second, "second"))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # it waits for its turn, and is not refused
    release.set()
    holder.join(10)
    waiter.join(10)
    assert not waiter.is_alive()
    assert marks(second) == ["first", "second"]
    assert turn_free(path)
    first.close()
    second.close()


def test_a_turn_not_granted_in_time_is_an_unavailable_store_and_writes_nothing(
    path: str,
) -> None:
    store = SqliteStore(path)
    store.db.turn_timeout_s = 0.3
    mark(store, "before")  # the uncontended path, once
    baseline = open_fds()
    frozen = os.open(path + SUFFIX, os.O_RDWR)  # a holder that never lets go in time
    fcntl.flock(frozen, fcntl.LOCK_EX)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as refused:
        mark(store, "refused")
    assert 0.3 <= time.monotonic() - started < 5
    assert refused.value.field == "store"
    assert "turn" in str(refused.value)
    with pytest.raises(StoreUnavailableError):  # a second wait queues behind the first
        mark(store, "refused again")
    fcntl.flock(frozen, fcntl.LOCK_UN)
    os.close(frozen)
    mark(store, "after")
    assert marks(store) == ["before", "after"]
    # the helper took the given-up turns once free and let them go: no lock, no leak
    deadline = time.monotonic() + 10
    while (open_fds() != baseline or not turn_free(path)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert open_fds() == baseline
    assert turn_free(path)
    store.close()


def helper_running() -> bool:
    return any(t.name == "cronwheel-sqlite-turn" for t in threading.enumerate())


def test_a_forked_child_waits_for_its_own_turn(path: str) -> None:
    """A child forked after its parent's store had waited (its helper thread running)
    gets a descriptor and a helper of its own: it waits for the turn, then writes."""
    store = SqliteStore(path)
    store.db.turn_timeout_s = 5
    other = os.open(path + SUFFIX, os.O_RDWR)  # another holder of the turn
    fcntl.flock(other, fcntl.LOCK_EX)
    waiter = threading.Thread(target=mark, args=(store, "parent"))
    waiter.start()
    deadline = time.monotonic() + 10
    while not helper_running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert helper_running()
    fcntl.flock(other, fcntl.LOCK_UN)
    waiter.join(10)
    fcntl.flock(other, fcntl.LOCK_EX)  # held again across the fork
    pid = fork(lambda: mark(store, "child") is None)  # its write waits, then lands
    time.sleep(0.2)
    assert running(pid)  # still waiting for its turn
    fcntl.flock(other, fcntl.LOCK_UN)
    assert exit_code(pid) == 0
    assert marks(store) == ["parent", "child"]
    os.close(other)
    store.close()
