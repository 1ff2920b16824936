"""examples/django_app: an order and its shipping job commit together in
``transaction.atomic``; a refused order leaves neither; ``manage.py runcronwheel`` (a
real process) runs the job."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from cronwheel.store.postgres import PostgresStore
from tests.conftest import PG_URL
from tests.examples.conftest import EXAMPLES, PYTHON, ExampleDb, run_until

HERE = EXAMPLES / "django_app"


@pytest.fixture
def django_db(example_db: ExampleDb, monkeypatch: pytest.MonkeyPatch) -> Iterator[ExampleDb]:
    import django  # the test extra installs it (so CI never skips this)
    from django.conf import settings

    monkeypatch.setenv("DATABASE_URL", example_db.url)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "shopsite.settings")
    monkeypatch.syspath_prepend(str(HERE))
    if settings.configured:  # one Django per process: point it at this test's schema
        settings.DATABASES["default"]["OPTIONS"] = {"options": f"-csearch_path={example_db.schema}"}
    django.setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    from orders.tasks import cw

    cw.store_url = example_db.url
    cw.close()
    yield example_db
    cw.close()
    connections.close_all()


def test_orders_and_their_jobs_commit_together(django_db: ExampleDb) -> None:
    from django.test import Client
    from orders.models import Order

    client = Client()

    def post(body: object) -> tuple[int, dict[str, object]]:
        r = client.post("/orders", data=json.dumps(body), content_type="application/json")
        return r.status_code, json.loads(r.content)

    status, made = post({"item": "book", "quantity": 2})
    assert (status, made["shipping"]) == (201, "queued")
    status, refused = post({"item": "book", "quantity": 99})
    assert (status, refused["field"]) == (409, "quantity")
    status, bad = post({"item": "", "quantity": 1})
    assert (status, bad["field"]) == (422, "item")
    assert Order.objects.count() == 1  # the refused order went with its job

    store = PostgresStore(PG_URL, schema=django_db.schema, pool_size=1)
    try:
        firings = store.list_firings(namespace="default")
        assert [f.state.value for f in firings] == ["queued"]
        order_id = made["id"]

        def shipped() -> bool:
            return Order.objects.get(pk=order_id).shipped_at is not None

        env = {"DATABASE_URL": django_db.url, "DJANGO_SETTINGS_MODULE": "shopsite.settings"}
        argv = [PYTHON, "manage.py", "runcronwheel", "--concurrency", "2"]
        run_until(argv, cwd=HERE, env=env, done=shipped, timeout=60)
        assert store.get_firing(firings[0].id).state.value == "succeeded"
    finally:
        store.close()


def test_runcronwheel_refuses_a_bad_concurrency(django_db: ExampleDb) -> None:
    import subprocess

    env = {**os.environ, "DATABASE_URL": django_db.url}
    argv = [PYTHON, "manage.py", "runcronwheel", "--concurrency", "0"]
    done = subprocess.run(
        argv, check=False, cwd=HERE, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--concurrency: must be a positive integer" in done.stderr


def test_a_nested_atomic_rolls_back_its_enqueue_and_autocommit_commits_at_once(
    django_db: ExampleDb,
) -> None:
    from django.db import connection, transaction
    from orders.tasks import cw, ship_order

    def enqueue_then_fail() -> None:
        with transaction.atomic():  # a savepoint of the outer block
            cw.enqueue(ship_order, 2, connection=connection)
            raise KeyError

    store = PostgresStore(PG_URL, schema=django_db.schema, pool_size=1)
    try:
        with transaction.atomic():
            cw.enqueue(ship_order, 1, connection=connection)
            with pytest.raises(KeyError):
                enqueue_then_fail()
            assert store.list_firings(namespace="default") == []  # not yet committed
        args = [
            store.get_job_by_id(f.job_id).spec.args for f in store.list_firings(namespace="default")
        ]
        assert args == [(1,)]
        cw.enqueue(ship_order, 3, connection=connection)  # autocommit: committed at once
        assert len(store.list_firings(namespace="default")) == 2
    finally:
        store.close()
