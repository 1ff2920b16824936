"""Fixtures of the HA suite: one Patroni cluster (tests/ha/cluster.py) for the session,
a fresh database on it per scenario, the run's figures.

The cluster needs Debian's ``etcd-server``, ``pgbouncer`` and ``haproxy`` and a Patroni
>= 3.0.3 (Debian 12's 3.0.2 has patroni/patroni#2689; ``.ci/run`` installs them, Patroni
from PyPI into /opt/cronwheel-ha): without them, or with an older Patroni only, the suite
skips locally and FAILS in CI, like every PostgreSQL test. Figures are printed (``pytest
-s``) and written to ``last_run.json`` in a temporary directory whose path is printed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_service
from tests.faults.harness import SIZES
from tests.ha.cluster import HaCluster
from tests.ha.scenario import HaScenario

_FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="session")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaCluster]:
    missing = [t for t in ("etcd",) if shutil.which(t) is None]
    missing += [t for t in ("pgbouncer", "haproxy") if not Path("/usr/sbin", t).exists()]
    if missing:
        require_service("the HA stack", RuntimeError(f"not installed: {', '.join(missing)}"))
    c = HaCluster(sync=True)
    try:
        version = c.locate_patroni()
    except RuntimeError as exc:
        require_service("the HA stack", exc)
    print(f"\n[ha] Patroni {version} from {c.patroni_bin}")
    # not under pytest's tmp (mode 0700): the postgres user runs the nodes
    c.base = Path(tempfile.mkdtemp(prefix="cronwheel-ha-"))
    c.base.chmod(0o755)
    base = c.base
    try:
        c.start(guard=True)  # stopped even if this run dies without its teardown
    except (RuntimeError, TimeoutError, OSError) as exc:
        c.clean()
        pytest.fail(f"the HA cluster did not start: {exc} (logs in {base / 'log'})")
    try:
        yield c
    finally:
        if os.environ.get("CRONWHEEL_HA_KEEP"):  # keep data and logs for a post-mortem
            c.stop()
            print(f"\n[ha] cluster stopped, kept in {base}")
        else:
            c.clean()
        if _FIGURES:
            path = tmp_path_factory.mktemp("ha") / "last_run.json"
            payload = {"size": "full" if SIZES.full else "smoke", "scenarios": _FIGURES}
            path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str))
            print(f"\n[ha] figures of this run: {path}")


def _scenario(
    tmp_path: Path, ha: HaCluster, request: pytest.FixtureRequest, via: str, listen: bool = True
) -> Iterator[HaScenario]:
    ha.wait_healthy(120)  # the previous scenario's node is back and streaming
    s = HaScenario(tmp_path, ha, via=via, listen=listen)
    try:
        yield s
    finally:
        try:
            if s.figures:
                _FIGURES[request.node.name] = s.figures
                (tmp_path / "figures.json").write_text(json.dumps(s.figures, default=str))
                print(f"\n[ha] {request.node.name}: {json.dumps(s.figures, default=str)}")
        finally:
            s.close()


@pytest.fixture
def scenario(tmp_path: Path, ha: HaCluster, request: pytest.FixtureRequest) -> Iterator[HaScenario]:
    """Processes on the multi-host URL (target_session_attrs=read-write)."""
    yield from _scenario(tmp_path, ha, request, "multi")


@pytest.fixture
def pooled(tmp_path: Path, ha: HaCluster, request: pytest.FixtureRequest) -> Iterator[HaScenario]:
    """Processes through PgBouncer (transaction mode) -> HAProxy -> the leader."""
    yield from _scenario(tmp_path, ha, request, "pgbouncer")


@pytest.fixture
def pooled_only(
    tmp_path: Path, ha: HaCluster, request: pytest.FixtureRequest
) -> Iterator[HaScenario]:
    """Through PgBouncer only: no direct LISTEN connections (workers poll)."""
    yield from _scenario(tmp_path, ha, request, "pgbouncer", listen=False)
