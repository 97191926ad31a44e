"""Uploaded bytes in S3-compatible object storage (``RELAY_BLOB_URL=s3://bucket/prefix``).

One object per document, ``<prefix><doc id>``, written once before the upload script makes
the document, read by the workers and for page images, deleted when the document's bytes are
dropped (``relay.state.blobs``). Everything goes through one boto3 client per process (thread
safe; its connection pool as large as the threads that call it), whose every call is bounded:
``RELAY_S3_CONNECT_TIMEOUT`` to connect, ``RELAY_S3_READ_TIMEOUT`` for each socket read or
write, ``RELAY_S3_ATTEMPTS`` tries in botocore's standard retry mode. What the ``RELAY_S3_*``
settings leave empty the SDK finds itself (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_CA_BUNDLE``, its files, an instance
role).

Errors are mapped here, at the boundary: a missing object reads as None (its bytes are gone);
anything else (no connection, a timeout, 5xx after the retries, access denied, no such
bucket) is :class:`relay.exceptions.BlobStoreUnavailable`, whose message says which.

``relay.state.blobs`` imports this module (and so boto3, ~0.3 s) only when the settings name
an S3 store: a process without one never loads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from relay.config import Settings
from relay.exceptions import BlobStoreUnavailable

# S3's DeleteObjects takes at most this many keys a call.
DELETE_BATCH = 1000
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


class S3Objects:
    """The documents' objects in one bucket under one prefix."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    @classmethod
    def from_settings(cls, settings: Settings, max_connections: int = 10) -> S3Objects:
        """The bucket of ``RELAY_BLOB_URL`` through a client made from the ``RELAY_S3_*``
        settings (each empty one left to the SDK's own configuration);
        ``max_connections``: the threads that will call it at once."""
        verify: bool | str | None = None  # the SDK's default: AWS_CA_BUNDLE, else certifi
        if not settings.s3_verify_tls:
            verify = False
        elif settings.s3_ca_bundle:
            verify = settings.s3_ca_bundle
        config = Config(
            connect_timeout=settings.s3_connect_timeout,
            read_timeout=settings.s3_read_timeout,
            retries={"total_max_attempts": settings.s3_attempts, "mode": "standard"},
            max_pool_connections=max(10, max_connections),
            s3={"addressing_style": "path"} if settings.s3_path_style else None,
        )
        secret = settings.s3_secret_access_key.reveal()
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.s3_endpoint_url or None,
            region_name=settings.s3_region or None,
            aws_access_key_id=settings.s3_access_key_id or None,
            aws_secret_access_key=secret or None,
            verify=verify,
            config=config,
        )
        url = settings.blob_url
        return cls(client, url.bucket, url.prefix)

    def key(self, doc_id: str) -> str:
        return self.prefix + doc_id

    def put(self, doc_id: str, content: bytes) -> None:
        """Write the document's object (whole, one request)."""
        with _mapped("writing", doc_id):
            self.client.put_object(Bucket=self.bucket, Key=self.key(doc_id), Body=content)

    def get(self, doc_id: str) -> bytes | None:
        """The document's bytes, or None when its object is gone."""
        with _mapped("reading", doc_id):
            try:
                reply = self.client.get_object(Bucket=self.bucket, Key=self.key(doc_id))
            except ClientError as exc:
                if _code(exc) in _MISSING:
                    return None
                raise
            body = reply["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

    def delete(self, doc_ids: Sequence[str]) -> list[str]:
        """Delete the documents' objects (a missing one counts as deleted); returns the ids
        whose objects are gone. Raises BlobStoreUnavailable when a call fails whole (the
        ids of the calls before it are deleted all the same)."""
        gone: list[str] = []
        for i in range(0, len(doc_ids), DELETE_BATCH):
            chunk = list(doc_ids[i : i + DELETE_BATCH])
            with _mapped("deleting", f"{len(chunk)} objects"):
                reply = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self.key(d)} for d in chunk], "Quiet": True},
                )
            failed = {
                e.get("Key") for e in reply.get("Errors", []) if e.get("Code") not in _MISSING
            }
            gone += [d for d in chunk if self.key(d) not in failed]
        return gone

    def close(self) -> None:
        self.client.close()


def _code(exc: BaseException) -> str:
    """The S3 error code of a botocore ``ClientError`` ('' for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


@contextmanager
def _mapped(doing: str, what: str) -> Iterator[None]:
    """Map botocore's and the socket's errors raised inside to BlobStoreUnavailable."""
    try:
        yield
    except (BotoCoreError, ClientError, OSError) as exc:
        code = _code(exc)
        detail = f"{code}: {exc}" if code else f"{type(exc).__name__}: {exc}"
        raise BlobStoreUnavailable(f"the blob store (S3) failed {doing} {what}: {detail}") from exc
