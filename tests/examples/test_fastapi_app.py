"""examples/fastapi_app: an order and its shipping job commit together; a refused order
leaves neither; a real `cronwheel worker` process runs the job."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType

import pytest

from cronwheel.store.postgres import PostgresStore
from tests.conftest import PG_URL
from tests.examples.conftest import EXAMPLES, PYTHON, ExampleDb, run_until

with warnings.catch_warnings():
    # starlette 1.x asks for the `httpx2` fork for its TestClient and warns when it runs
    # on `httpx` (as tests/api/conftest.py): a packaging notice, not about this code
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

HERE = EXAMPLES / "fastapi_app"


@pytest.fixture
def shop(example_db: ExampleDb, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("DATABASE_URL", example_db.url)
    monkeypatch.syspath_prepend(str(HERE))
    sys.modules.pop("shop_api", None)
    module = importlib.import_module("shop_api")
    yield module
    module.cw.close()
    sys.modules.pop("shop_api", None)


def test_orders_and_their_jobs_commit_together(shop: ModuleType, example_db: ExampleDb) -> None:
    with TestClient(shop.api) as client:
        made = client.post("/orders", json={"item": "book", "quantity": 2})
        assert made.status_code == 201, made.text
        assert made.json()["shipping"] == "queued"
        refused = client.post("/orders", json={"item": "book", "quantity": 99})
        assert refused.status_code == 409
        assert refused.json()["detail"]["field"] == "quantity"
        bad = client.post("/orders", json={"item": "", "quantity": 1})
        assert bad.status_code == 422
        order_id = made.json()["id"]
        assert client.get(f"/orders/{order_id}").json()["shipped_at"] is None

    # the refused order and its job were rolled back together: one order, one firing
    assert example_db.one("SELECT count(*) FROM orders") == (1,)
    store = PostgresStore(PG_URL, schema=example_db.schema, pool_size=1)
    try:
        firings = store.list_firings(namespace="default")
        assert [f.state.value for f in firings] == ["queued"]

        def shipped() -> bool:
            row = example_db.one(f"SELECT shipped_at FROM orders WHERE id = {order_id}")
            return row is not None and row[0] is not None

        worker = [PYTHON, "-m", "cronwheel", "worker", "shop_api:cw", "--store", example_db.url]
        run_until(worker, cwd=HERE, env={"DATABASE_URL": example_db.url}, done=shipped, timeout=60)
        assert store.get_firing(firings[0].id).state.value == "succeeded"
    finally:
        store.close()
