"""The PostgreSQL store's JSON loader (store/postgres/jsonload.py): orjson's speed,
the standard library's values, for every document, big integers and huge numbers
included."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from cronwheel.store.postgres.jsonload import loads

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: past 2**64 too
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
documents = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def _same(a: object, b: object) -> bool:
    """Equal, with the same types throughout (1 is not 1.0, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b)  # type: ignore[arg-type]
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)  # type: ignore[attr-defined,index]
    return a == b


@given(documents, st.booleans())
def test_loads_gives_what_json_loads_gives(doc: object, ascii_only: bool) -> None:
    text = json.dumps(doc, ensure_ascii=ascii_only).encode()
    assert _same(loads(text), json.loads(text))
    assert _same(loads(memoryview(text)), json.loads(text))  # psycopg may pass a view


def test_what_orjson_would_change_is_read_by_the_standard_library() -> None:
    big = b'{"a": [123456789012345678901234567890, -18446744073709551616, 9223372036854775807]}'
    assert loads(big) == {"a": [123456789012345678901234567890, -(2**64), 2**63 - 1]}
    assert loads(b"[1e400, -1e400]") == [math.inf, -math.inf]  # orjson refuses; PG keeps it
    assert loads(b'"\\ud800"') == "\ud800"  # a lone surrogate: orjson refuses
    assert loads(b"0.1234567890123456789") == 0.1234567890123456789
