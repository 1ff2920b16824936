"""A FastAPI shop whose orders and their shipping jobs commit together: cronwheel's
transactional enqueue (README "Transactional enqueue"). How to run it: README.md here.

- the lifespan opens the connection pool and cronwheel's store (creating the tables on
  first start) and closes both on shutdown;
- the ``connection`` dependency lends each request a connection of the pool;
- ``POST /orders`` inserts the order and enqueues ``ship_order`` in one transaction on
  that connection: both are committed, or neither is.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, HTTPException
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

from cronwheel import App

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
MAX_QUANTITY = 10  # a business rule, checked after the order and its job were written

cw = App(DATABASE_URL)  # cronwheel's tables live in the shop's own database


@cw.task(retries=5)
def ship_order(ctx: Any, order_id: int) -> None:
    """Ship the order (here: mark it shipped). Runs on a cronwheel worker, at least once:
    the update is idempotent."""
    with psycopg.connect(DATABASE_URL) as conn:
        conn.execute(
            "UPDATE orders SET shipped_at = now() WHERE id = %s AND shipped_at IS NULL",
            (order_id,),
        )
    ctx.logger.info("order_shipped", order_id=order_id, key=ctx.idempotency_key)


pool = AsyncConnectionPool(DATABASE_URL, kwargs={"autocommit": True}, open=False)


@asynccontextmanager
async def lifespan(_api: FastAPI) -> AsyncIterator[None]:
    await pool.open()
    async with pool.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, item text NOT NULL,"
            " quantity int NOT NULL, shipped_at timestamptz)"
        )
    await asyncio.to_thread(lambda: cw.store)  # opens (and migrates) cronwheel's store
    try:
        yield
    finally:
        await pool.close()
        cw.close()


api = FastAPI(title="shop", lifespan=lifespan)


async def connection() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A pooled connection (autocommit: each endpoint opens its own transaction)."""
    async with pool.connection() as conn:
        yield conn


Connection = Annotated[psycopg.AsyncConnection[Any], Depends(connection)]


class OrderIn(BaseModel):
    item: str = Field(min_length=1, max_length=100)
    quantity: int = Field(ge=1)


@api.post("/orders", status_code=201)
async def create_order(order: OrderIn, conn: Connection) -> dict[str, Any]:
    async with conn.transaction():  # commits before the response; an exception rolls back
        cur = await conn.execute(
            "INSERT INTO orders (item, quantity) VALUES (%s, %s) RETURNING id",
            (order.item, order.quantity),
        )
        row = await cur.fetchone()
        assert row is not None
        order_id = int(row[0])
        firing = await cw.enqueue_async(ship_order, order_id, connection=conn)
        if order.quantity > MAX_QUANTITY:
            # the order and its shipping job are both rolled back: no job ever runs
            raise HTTPException(
                409, {"field": "quantity", "error": f"at most {MAX_QUANTITY} per order"}
            )
    return {"id": order_id, "shipping": firing.state.value}


@api.get("/orders/{order_id}")
async def get_order(order_id: int, conn: Connection) -> dict[str, Any]:
    cur = await conn.execute(
        "SELECT id, item, quantity, shipped_at FROM orders WHERE id = %s", (order_id,)
    )
    row = await cur.fetchone()
    if row is None:
        raise HTTPException(404, {"field": "order_id", "error": "no such order"})
    shipped = None if row[3] is None else row[3].isoformat()
    return {"id": row[0], "item": row[1], "quantity": row[2], "shipped_at": shipped}
