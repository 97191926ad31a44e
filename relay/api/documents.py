"""``POST /documents`` (multipart upload) and ``GET /documents/{id}`` (status endpoint).

Uploads never hold more than the limit in memory: a ``Content-Length`` past
``max_upload_bytes + MULTIPART_OVERHEAD`` is refused before the body is read; otherwise the
body streams through a counter that stops it (413) as soon as it passes the same bound, into
Starlette's ``MultiPartParser``, which spools file parts to a temporary file past 1 MiB. The
file part itself must then be at most ``max_upload_bytes``.

Besides ``file`` and ``batch_name`` the form may carry ``metadata`` (the document's) and
``batch_metadata`` (the batch's): each a JSON object as the part's text, checked
(``relay.state.metadata``: 422 ``invalid_metadata``) before anything is written, and stored by the
upload's one script.
"""

from __future__ import annotations

import mimetypes
import re
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import Response

from relay import tracing
from relay.api.access import admit_write
from relay.api.bodies import declared_length, json_response, media_type
from relay.api.errors import (
    BadRequest,
    NotFound,
    PayloadTooLarge,
    Unprocessable,
    UnsupportedMediaType,
    status_of,
)
from relay.api.fast_path import serve_status
from relay.api.state import state
from relay.api.throttles import UPLOADS
from relay.exceptions import InvalidMetadata
from relay.state.metadata import MOST_BYTES
from relay.state.metadata import parse as parse_metadata
from relay.state.model import BATCH_NAME_RE, IDEMPOTENCY_KEY_RE, Document, valid_batch_name
from relay.state.store import DocumentQuery
from relay.text import without_controls

# Room for boundaries, part headers and the fields (batch_name, metadata, batch_metadata)
# around the file's bytes.
MULTIPART_OVERHEAD = 64 * 1024
# Largest text of one field: room for metadata within RELAY_METADATA_MAX_BYTES (at most
# MOST_BYTES as compact JSON) written with spacing or \u escapes; its three fields fit in
# MULTIPART_OVERHEAD. A longer field is 400 (the multipart parser stops there).
FIELD_BYTES = 4 * MOST_BYTES
MAX_FILENAME = 255
_PARTS = frozenset({"file", "batch_name", "metadata", "batch_metadata"})
_GENERATED_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][\w.+-]*/[\w.+-]+(\s*;[ -~]*)?", re.ASCII)
# An upload's Idempotency-Key: 1 to 255 visible ASCII characters (no spaces).


async def _bounded(stream: AsyncIterator[bytes], max_bytes: int) -> AsyncGenerator[bytes, None]:
    """Pass the body through, raising PayloadTooLarge once it passes ``max_bytes``."""
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > max_bytes:
            raise PayloadTooLarge(f"upload larger than {max_bytes - MULTIPART_OVERHEAD} bytes")
        yield chunk


def clean_filename(raw: str | None) -> str:
    """The last path component (``/`` or ``\\``), without controls, line and paragraph
    separators, invisible characters and bidi controls (``relay.text.without_controls``), at
    most 255 characters; ``upload`` when nothing is left."""
    name = without_controls((raw or "").replace("\\", "/").rsplit("/", 1)[-1]).strip()
    if name in {"", ".", ".."}:
        return "upload"
    return name[:MAX_FILENAME]


def content_type_of(upload: UploadFile, filename: str) -> str:
    """The part's declared type when it is specific and well formed, else a guess from the
    filename, else ``application/octet-stream``."""
    declared = (upload.headers.get("content-type") or "").strip()
    specific = declared.split(";", 1)[0].strip().lower() != "application/octet-stream"
    if specific and len(declared) <= 255 and _MEDIA_TYPE.fullmatch(declared):
        return declared
    guessed, _ = mimetypes.guess_type(filename, strict=False)
    return guessed or "application/octet-stream"


async def _parse_form(request: Request, max_body: int) -> FormData:
    if media_type(request) != "multipart/form-data":
        raise UnsupportedMediaType("expected Content-Type: multipart/form-data")
    length = declared_length(request)
    if length is not None and length > max_body:
        raise PayloadTooLarge(f"upload larger than {max_body - MULTIPART_OVERHEAD} bytes")
    parser = MultiPartParser(
        request.headers,
        _bounded(request.stream(), max_body),
        max_files=2,
        max_fields=6,
        max_part_size=FIELD_BYTES,
    )
    try:
        return await parser.parse()
    except MultiPartException as exc:
        raise BadRequest(f"invalid multipart body: {exc.message}") from exc


def _single(form: FormData, name: str) -> Any:
    values = form.getlist(name)
    if len(values) > 1:
        raise Unprocessable(f"part {name!r} given more than once")
    return values[0] if values else None


@tracing.server("POST /api/v1/documents", status_of)
async def upload_document(request: Request) -> Response:
    """Store one uploaded file as a queued document of a batch (created if new): 201.
    Authenticated and counted against the account's upload rate before the body is read, in
    one round trip that also holds the body's declared size on the account's pending-bytes
    total (``relay.api.access.admit_write``); its bytes count against the account's
    pending-bytes quota (``relay.state.store.AsyncStore.upload``). With an ``Idempotency-Key``
    the batch's document an earlier upload with that key made is answered instead, as it
    is now: a client may retry an upload whose answer it lost, or that was answered 503.
    Traced (``relay.tracing``): the request's span is kept with the document."""
    st = state(request)
    limit = st.settings.max_upload_bytes
    idempotency_key = _idempotency_key(request)
    admitted = await admit_write(request, UPLOADS, _hold(request, st.store.blobs.kind, limit))
    try:
        form = await _parse_form(request, limit + MULTIPART_OVERHEAD)
        try:
            unknown = sorted(set(form.keys()) - _PARTS)
            if unknown:
                raise Unprocessable(f"unexpected form part(s): {', '.join(unknown)[:200]}")
            upload = _single(form, "file")
            if not isinstance(upload, UploadFile):
                raise Unprocessable("part 'file' is required and must be a file (with a filename)")
            if upload.size is not None and upload.size > limit:
                raise PayloadTooLarge(f"upload larger than {limit} bytes")
            batch_name = _single(form, "batch_name")
            if batch_name is None:
                batch_name = "batch_" + "".join(
                    secrets.choice(_GENERATED_ALPHABET) for _ in range(12)
                )
            elif not isinstance(batch_name, str) or not valid_batch_name(batch_name):
                raise Unprocessable(
                    f"batch_name must match {BATCH_NAME_RE.pattern}",
                    error_type="invalid_batch_name",
                )
            metadata = _metadata(form, "metadata", request)
            batch_metadata = _metadata(form, "batch_metadata", request)
            filename = clean_filename(upload.filename)
            content_type = content_type_of(upload, filename)
            content = await upload.read()
        finally:
            await form.close()
        if len(content) > limit:
            raise PayloadTooLarge(f"upload larger than {limit} bytes")
        ref = await st.store.locate(admitted.account, batch_name)
    except BaseException:
        # Refused before the store took the hold over: it goes back (a crash here leaves the
        # total high, which the next recount at the quota's edge corrects).
        await st.resources.release_hold(admitted.account, admitted.held)
        raise
    doc = await st.store.upload(
        ref,
        filename=filename,
        content_type=content_type,
        content=content,
        held=admitted.held,
        admitted=admitted.within_quota,
        idempotency_key=idempotency_key,
        metadata=metadata,
        batch_metadata=batch_metadata,
        trace=tracing.traceparent(),
    )
    tracing.annotate(
        {"relay.account": ref.account, "relay.batch": ref.name, "relay.document.id": doc.id}
    )
    await st.resources.replicated(f"upload {doc.id}", ref.shard)
    return json_response(
        doc.to_json(),
        201,
        headers={"Location": f"/api/v1/documents/{doc.id}", **admitted.headers},
    )


def _metadata(form: FormData, name: str, request: Request) -> str:
    """The canonical form of the form's ``name`` field (``relay.state.metadata``), "" when absent
    or ``{}``; 422 ``invalid_metadata`` for a file part or anything but a flat JSON object
    within RELAY_METADATA_MAX_KEYS and RELAY_METADATA_MAX_BYTES."""
    raw = _single(form, name)
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise Unprocessable(
            f"part {name!r} must be a form field holding a JSON object, not a file",
            error_type="invalid_metadata",
        )
    settings = state(request).settings
    try:
        return parse_metadata(
            raw,
            field=name,
            max_keys=settings.metadata_max_keys,
            max_bytes=settings.metadata_max_bytes,
        )
    except InvalidMetadata as exc:
        raise Unprocessable(exc.message, error_type="invalid_metadata") from exc


def _idempotency_key(request: Request) -> str | None:
    """The upload's ``Idempotency-Key`` header, if any: a retry with the key of an upload
    the batch already has answers that document and makes no other
    (``relay.state.store.AsyncStore.upload``). 400 when malformed or given twice."""
    given = request.headers.getlist("idempotency-key")
    if not given:
        return None
    if len(given) > 1 or not IDEMPOTENCY_KEY_RE.fullmatch(given[0]):
        raise BadRequest(
            "Idempotency-Key must be given once, 1 to 255 visible ASCII characters",
            error_type="invalid_idempotency_key",
        )
    return given[0]


def _hold(request: Request, blob_kind: str, limit: int) -> int:
    """What an upload holds on the account's pending total before its body is read: the
    body's declared size, at most the file limit (the file is part of the body, and larger
    is refused). 0 when nothing is charged (blobs outside Redis), when the body has no
    declared size (chunked) or one that is refused anyway (413): such an upload reserves its
    exact bytes after reading them, one round trip more."""
    try:
        length = declared_length(request)
    except BadRequest:
        return 0  # answered 400 once the request is authenticated and counted, as before
    if blob_kind != "redis" or length is None or length > limit + MULTIPART_OVERHEAD:
        return 0
    return min(length, limit)


async def get_document(request: Request) -> Response:
    """The document (rate-limited status endpoint; another account's is a 404)."""

    async def render(account: str, doc: Document | None) -> Any:
        if doc is None:
            raise NotFound("no such document")
        return doc.to_json()

    return await serve_status(request, DocumentQuery(request.path_params["id"]), render)
