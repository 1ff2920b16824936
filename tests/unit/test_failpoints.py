from __future__ import annotations

import pytest

from cronwheel import failpoints


def test_parse_actions_and_nth() -> None:
    points = failpoints._parse("a.b=kill@3; c=sleep(0.5);d=log")
    assert (points["a.b"].action, points["a.b"].nth) == ("kill", 3)
    assert (points["c"].action, points["c"].seconds) == ("sleep", 0.5)
    assert points["d"].action == "log"


@pytest.mark.parametrize("bad", ["x", "a=explode", "A=kill", "a=kill@x"])
def test_bad_specs_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="CRONWHEEL_FAILPOINTS"):
        failpoints._parse(bad)


def test_raise_on_the_nth_hit_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failpoints, "_POINTS", failpoints._parse("p=raise@2"))
    failpoints.hit("p")
    with pytest.raises(failpoints.FailpointError):
        failpoints.hit("p")
    failpoints.hit("p")
    failpoints.hit("unknown")
