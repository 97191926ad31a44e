"""Many deliveries fast, for the search and recovery tests: the delivery scripts driven
directly (create, claim, record) with a clock that moves 1 ms per delivery, no HTTP."""

from __future__ import annotations

from relay.state.model import Attempt, Delivery, DeliveryStatus
from relay.state.store import BatchRef
from relay.state.webhooks import AsyncWebhookStore, WebhookStore
from tests.support.helpers import Clients

URL = "https://hooks.example.com/relay"


class WebhookClients(Clients):
    """:class:`Clients` with relay's webhook stores on them: ``d`` (sync, the workers'; the
    keyword arguments go to it) and ``hooks`` (asyncio, the API's)."""

    def __init__(self, url: str, **store: int) -> None:
        super().__init__(url)
        self.d = WebhookStore(self.client, self.clock, **store)
        self.hooks = AsyncWebhookStore(self.aclient, self.clock)

    def get(self, ident: str) -> Delivery:
        """The delivery ``ident``, which must exist."""
        found = self.d.get(ident)
        assert found is not None, ident
        return found

    def status(self, ident: str) -> DeliveryStatus:
        return self.get(ident).status


class Seeder(WebhookClients):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._seq: dict[BatchRef, int] = {}

    def batch(self, account: str, name: str) -> BatchRef:
        """A batch record as the scripts leave it, with a webhook registered."""
        ref = BatchRef(account, name)
        self.client.hset(
            ref.key,
            mapping={"account": account, "name": name, "created_at": 1, "total": 1, "queued": 1},
        )
        self.run(self.hooks.register(ref, URL, "http://api"))
        return ref

    def delivery(self, ref: BatchRef, outcome: str = "succeeded", *, tick: int = 1) -> str:
        """One completion's delivery created ``tick`` ms after the previous one, then, unless
        ``outcome`` is 'pending', attempted once with that outcome ('succeeded' | 'failed')."""
        self.clock.advance(tick)
        seq = self._seq.get(ref, 0) + 1
        self._seq[ref] = seq
        created, ident = self.d.create(ref, seq, b'{"type":"batch.completed"}')
        assert created and ident
        if outcome == "pending":
            return ident
        (claimed,) = self.d.claim(ref.shard, limit=1, lease_ms=60_000, token="seed")
        assert claimed.id == ident
        code = 200 if outcome == "succeeded" else 503
        attempt = Attempt(claimed.number, self.clock(), 1.0, code, None, "")
        assert self.d.record(claimed, "seed", attempt, outcome=outcome).moved
        return ident
