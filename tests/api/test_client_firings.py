"""cronwheel.Client: the namespace's firings page by page (``firings_page``), the
namespace-wide ``list_firings``, a firing's attempts, CLAIMED read back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronwheel import Client, ValidationError, every
from cronwheel.domain.attempts import AttemptOutcome
from cronwheel.domain.firing import FiringState
from cronwheel.store.protocol import Completion
from cronwheel.web.ids import ids_for
from tests.api.conftest import Server


def test_pages_filters_and_attempts(server: Server) -> None:
    with Client(server.url, token=server.write, timeout=5) as api:
        api.put_job("a", "t", every("1h"))
        api.put_job("b", "t", every("1h"))
        fired = [api.trigger(name).id for name in ("a", "b", "a", "b", "a")]
        page = api.firings_page(limit=2)
        seen = [f.id for f in page.items]
        while page.next_cursor is not None:
            page = api.firings_page(limit=2, cursor=page.next_cursor)
            seen += [f.id for f in page.items]
        assert seen == fired[::-1]  # newest first (ids shown are not ordered)
        assert [f.id for f in api.list_firings(page_size=2)] == seen  # every job's
        assert [f.id for f in api.firings_page(job="b").items] == [fired[3], fired[1]]
        gone = datetime(2000, 1, 1, tzinfo=UTC)
        assert api.firings_page(scheduled_to=gone).items == []
        assert len(api.firings_page(job="b", scheduled_from=gone, states=["queued"]).items) == 2
        # a held firing reads back CLAIMED, with its claim instant and one attempt
        (held,) = server.store.claim("w1", tasks=["t"], limit=1, start=0)
        (claimed,) = api.firings_page(states=["claimed"]).items
        assert claimed.state is FiringState.CLAIMED and claimed.claimed_at is not None
        assert claimed.id == ids_for(server.store).encode("firing", held.firing.id)  # the id shown
        (attempt,) = api.list_attempts(claimed.id)
        assert (attempt.outcome, attempt.worker_id) == (AttemptOutcome.CLAIMED, "w1")
        assert server.store.start("w1", [(held.firing.id, held.claim_token)])
        now = server.store.now()
        done = Completion(
            firing_id=held.firing.id,
            claim_token=held.claim_token,
            succeeded=True,
            started_at=now,
            finished_at=now,
        )
        assert server.store.complete([done]) == [True]
        (attempt,) = api.list_attempts(claimed.id)
        assert attempt.outcome is AttemptOutcome.SUCCEEDED and attempt.finished_at == now
        with pytest.raises(ValidationError) as bad:
            api.firings_page(limit=5000)
        assert bad.value.field == "limit"
