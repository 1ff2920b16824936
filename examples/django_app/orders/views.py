"""``POST /orders``: the order row and its ``ship_order`` job in one ``transaction.atomic``
block on Django's connection; ``GET /orders/<id>``."""

from __future__ import annotations

import json

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from orders.models import Order
from orders.tasks import cw, ship_order

MAX_QUANTITY = 10  # a business rule, checked after the order and its job were written


class TooMany(Exception):
    pass


def _error(status: int, field: str, message: str) -> JsonResponse:
    return JsonResponse({"field": field, "error": message}, status=status)


@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    try:
        data = json.loads(request.body)
    except ValueError:
        return _error(400, "body", "must be a JSON object")
    if not isinstance(data, dict):
        return _error(400, "body", "must be a JSON object")
    item = data.get("item")
    if not isinstance(item, str) or not 1 <= len(item) <= 100:
        return _error(422, "item", "must be text of 1 to 100 characters")
    quantity = data.get("quantity")
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
        return _error(422, "quantity", "must be a positive integer")
    try:
        with transaction.atomic():
            order = Order.objects.create(item=item, quantity=quantity)
            firing = cw.enqueue(ship_order, order.pk, connection=connection)
            if quantity > MAX_QUANTITY:
                raise TooMany  # rolls back the order and its job: no job ever runs
    except TooMany:
        return _error(409, "quantity", f"at most {MAX_QUANTITY} per order")
    return JsonResponse({"id": order.pk, "shipping": firing.state.value}, status=201)


@require_GET
def get_order(_request: HttpRequest, order_id: int) -> JsonResponse:
    order = Order.objects.filter(pk=order_id).first()
    if order is None:
        return _error(404, "order_id", "no such order")
    shipped = None if order.shipped_at is None else order.shipped_at.isoformat()
    return JsonResponse(
        {"id": order.pk, "item": order.item, "quantity": order.quantity, "shipped_at": shipped}
    )
