"""The document job (relay.runtime.processing.run_document) run in this process on a real Redis,
with a worker context of the test's own: each outcome stored, the lease renewed while the extractor
runs and a lost lease respected, the outcome counted in the metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import redis.asyncio

from relay.config import load_settings
from relay.redis import keyspace
from relay.runtime.context import WorkerContext
from relay.runtime.detector import Detector
from relay.runtime.processing import run_document
from relay.state.blobs import BlobStore
from relay.state.model import Document, Status
from relay.state.store import AsyncStore, BatchRef
from tests.support.extractors import REFUSED_CODE, Gate
from tests.support.helpers import FakeClock, wait_until

REF = BatchRef("acme", "b1")
CSV = b"sku,qty\nA-1,2\nB-7,5\n"

ContextFactory = Callable[..., WorkerContext]


@pytest.fixture
def make_ctx(redis_url: str) -> Iterator[ContextFactory]:
    """``make_ctx(RELAY_EXTRACTOR=..., ...)``: a worker context on the test's Redis and a
    FakeClock of its own (``ctx.clock``), closed after the test."""
    made: list[WorkerContext] = []

    def make(**settings: str) -> WorkerContext:
        env = {"RELAY_REDIS_URL": redis_url, **settings}
        ctx = WorkerContext(load_settings(env, dotenv=None), FakeClock())
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.redis.close()


def upload(ctx: WorkerContext, content: bytes = CSV, fields: list[str] | None = None) -> str:
    """Upload one document as the API does and hand it out; its id."""

    async def go() -> str:
        client = redis.asyncio.Redis.from_url(ctx.settings.redis_url)
        try:
            api = AsyncStore(client, BlobStore(ctx.settings.blob_dir), ctx.clock)
            doc = await api.upload(REF, filename="a.csv", content_type="text/csv", content=content)
            await api.process(REF, fields)
        finally:
            await client.aclose()
        return doc.id

    return asyncio.run(go())


def document(ctx: WorkerContext, doc_id: str) -> Document:
    return Document.from_hash(ctx.redis.hgetall(keyspace.doc(REF.shard, doc_id)))


def counted(ctx: WorkerContext) -> dict[str, int]:
    """Documents counted in the flushed metrics, by status."""
    prefix = b"relay_documents_processed_total|status="
    stored = ctx.redis.hgetall(keyspace.metrics())
    return {k.removeprefix(prefix).decode(): int(v) for k, v in stored.items() if prefix in k}


def fake_clock(ctx: WorkerContext) -> FakeClock:
    assert isinstance(ctx.clock, FakeClock)
    return ctx.clock


@contextmanager
def mid_document(ctx: WorkerContext, gate: Gate) -> Iterator[tuple[str, Future[str]]]:
    """Run the job of a new document in a thread, with the ``gated`` extractor: yields (its
    id, the job's outcome to come) once the extractor holds it, and opens the gate at the end."""
    doc_id = upload(ctx, gate.document(CSV))
    with ThreadPoolExecutor(1) as pool:
        job = pool.submit(run_document, ctx, doc_id, REF.account, REF.name)
        try:
            assert gate.wait_started(20), "the extractor never started"
            yield doc_id, job
        finally:
            gate.open()


def test_a_document_is_extracted_and_its_batch_completes(make_ctx: ContextFactory) -> None:
    ctx = make_ctx()
    doc_id = upload(ctx, fields=["sku"])
    assert run_document(ctx, doc_id, REF.account, REF.name) == "succeeded; batch completed (seq 1)"
    doc = document(ctx, doc_id)
    assert doc.status is Status.SUCCEEDED and doc.completed_at == ctx.clock()
    items = ctx.redis.get(keyspace.doc_items(REF.shard, doc_id))
    assert items == (  # only the batch's fields, in the rows and in the table
        b'{"line_items":[{"sku":"A-1"},{"sku":"B-7"}],'
        b'"tables":[{"page":1,"rows":[["sku"],["A-1"],["B-7"]],"confidence":null,"bbox":null}]}'
    )
    assert ctx.redis.get(keyspace.blob(REF.shard, doc_id)) is None  # its bytes are gone
    assert ctx.redis.zscore(keyspace.leases(REF.shard), doc_id) is None
    assert counted(ctx) == {"succeeded": 1}
    # A second job for the same document (a duplicate wake-up) does nothing.
    assert run_document(ctx, doc_id, REF.account, REF.name) == "not queued"
    assert counted(ctx) == {"succeeded": 1}


def test_an_extraction_error_fails_the_document_with_its_code(make_ctx: ContextFactory) -> None:
    ctx = make_ctx(RELAY_EXTRACTOR="tests.support.extractors:refuses")
    doc_id = upload(ctx)
    assert run_document(ctx, doc_id, REF.account, REF.name) == "failed; batch completed (seq 1)"
    doc = document(ctx, doc_id)
    assert doc.status is Status.FAILED
    assert (doc.error_code, doc.error_message) == (REFUSED_CODE, "a.csv is locked")
    assert counted(ctx) == {"failed": 1}


def test_a_plug_in_raising_anything_else_is_an_extraction_error(
    make_ctx: ContextFactory,
) -> None:
    ctx = make_ctx(RELAY_EXTRACTOR="tests.support.extractors:crashes")
    doc_id = upload(ctx)
    assert run_document(ctx, doc_id, REF.account, REF.name).startswith("failed")
    doc = document(ctx, doc_id)
    assert doc.status is Status.FAILED and doc.error_code == "extraction_error"
    assert doc.error_message == "KeyError: 'a bug in the plug-in'"
    assert counted(ctx) == {"failed": 1}


@pytest.mark.parametrize("in_redis", [True, False], ids=["redis-blob", "file-blob"])
def test_a_document_whose_bytes_are_gone_fails_blob_missing(
    make_ctx: ContextFactory, tmp_path: Path, in_redis: bool
) -> None:
    ctx = make_ctx() if in_redis else make_ctx(RELAY_BLOB_DIR=str(tmp_path))
    doc_id = upload(ctx)
    if in_redis:
        assert ctx.redis.delete(keyspace.blob(REF.shard, doc_id)) == 1
    else:
        BlobStore(str(tmp_path)).path(doc_id).unlink()
    assert run_document(ctx, doc_id, REF.account, REF.name).startswith("failed")
    doc = document(ctx, doc_id)
    assert doc.status is Status.FAILED and doc.error_code == "blob_missing"
    assert counted(ctx) == {"failed": 1}


def test_the_lease_is_renewed_while_the_extractor_runs(
    make_ctx: ContextFactory, tmp_path: Path
) -> None:
    ctx = make_ctx(
        RELAY_EXTRACTOR="tests.support.extractors:gated",
        RELAY_LEASE_SECONDS="0.15",
        RELAY_EXTRACT_TIMEOUT="30",
    )
    clock = fake_clock(ctx)
    gate = Gate(tmp_path / "gate")
    with mid_document(ctx, gate) as (doc_id, job):
        claimed_until = ctx.redis.zscore(keyspace.leases(REF.shard), doc_id)
        assert claimed_until == clock() + 150
        # Far past the first lease by the store's clock: only a renewal keeps it ours.
        clock.advance(10_000)
        wait_until(
            lambda: ctx.redis.zscore(keyspace.leases(REF.shard), doc_id) == clock() + 150,
            5,
            0.01,
            "the lease was not renewed",
        )
        assert Detector(ctx).sweep_leases() == 0
        assert document(ctx, doc_id).status is Status.PROCESSING
        gate.open()
        assert job.result(10) == "succeeded; batch completed (seq 1)"
    assert document(ctx, doc_id).status is Status.SUCCEEDED


def test_an_outcome_after_the_lease_was_lost_is_not_stored(
    make_ctx: ContextFactory, tmp_path: Path
) -> None:
    ctx = make_ctx(RELAY_EXTRACTOR="tests.support.extractors:gated", RELAY_LEASE_SECONDS="60")
    gate = Gate(tmp_path / "gate")
    with mid_document(ctx, gate) as (doc_id, job):
        fake_clock(ctx).advance(60_000)  # the lease runs out (its next renewal is 20 s away)
        assert Detector(ctx).sweep_leases() == 1  # the sweeper hands the document out again
        gate.open()
        assert job.result(10) == "lease lost"
    doc = document(ctx, doc_id)
    assert doc.status is Status.QUEUED and doc.completed_at is None
    assert ctx.redis.get(keyspace.doc_items(REF.shard, doc_id)) is None
    assert ctx.redis.exists(keyspace.blob(REF.shard, doc_id)) == 1  # kept for the next claim
    assert counted(ctx) == {}
    # The next job processes it: its second claim.
    assert run_document(ctx, doc_id, REF.account, REF.name).startswith("succeeded")
    assert ctx.redis.hget(keyspace.doc(REF.shard, doc_id), "claims") == b"2"
    assert counted(ctx) == {"succeeded": 1}
