"""``POST /documents`` (multipart upload) and ``GET /documents/{id}`` (status endpoint).

Uploads never hold more than the limit in memory: a ``Content-Length`` past
``max_upload_bytes`` plus the multipart allowance (:func:`allowance`) is refused before the
body is read; otherwise the body streams through a counter that stops it (413) as soon as it
passes the same bound, into Starlette's ``MultiPartParser``, which spools file parts to a
temporary file past 1 MiB and stops at the first file part past ``max_files_per_upload``
(422 ``too_many_files``). The file parts together must then be at most ``max_upload_bytes``.

Each ``file`` part is a document (docs/decisions.md, "Several files in one upload"). Besides
them and ``batch_name`` the form may carry ``metadata`` (every document's of the request) and
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
from relay.api.access import admit_write, weigh_write
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
from relay.api.responses import UploadedDocumentsJSON
from relay.api.state import state
from relay.api.throttles import UPLOADS
from relay.config import Settings
from relay.exceptions import InvalidMetadata
from relay.state.metadata import MOST_BYTES
from relay.state.metadata import parse as parse_metadata
from relay.state.model import BATCH_NAME_RE, IDEMPOTENCY_KEY_RE, Document, valid_batch_name
from relay.state.store import DocumentQuery
from relay.state.uploads import NewFile
from relay.text import without_controls

# Room for boundaries, part headers and the fields (batch_name, metadata, batch_metadata)
# around the files' bytes, plus PART_OVERHEAD for each file part the settings allow (its
# boundary and headers: a 255-character filename and a content type).
MULTIPART_OVERHEAD = 64 * 1024
PART_OVERHEAD = 1024
# Largest text of one field: room for metadata within RELAY_METADATA_MAX_BYTES (at most
# MOST_BYTES as compact JSON) written with spacing or \u escapes; its three fields fit in
# MULTIPART_OVERHEAD. A longer field is 400 (the multipart parser stops there).
FIELD_BYTES = 4 * MOST_BYTES
MAX_FILENAME = 255
_PARTS = frozenset({"file", "batch_name", "metadata", "batch_metadata"})
_GENERATED_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][\w.+-]*/[\w.+-]+(\s*;[ -~]*)?", re.ASCII)
# An upload's Idempotency-Key: 1 to 255 visible ASCII characters (no spaces).


def allowance(settings: Settings) -> int:
    """Bytes a multipart body may hold beyond ``max_upload_bytes``: boundaries, part headers
    and the fields, for as many file parts as an upload may carry."""
    return MULTIPART_OVERHEAD + PART_OVERHEAD * settings.max_files_per_upload


async def _bounded(
    stream: AsyncIterator[bytes], max_bytes: int, limit: int
) -> AsyncGenerator[bytes, None]:
    """Pass the body through, raising PayloadTooLarge once it passes ``max_bytes``."""
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > max_bytes:
            raise PayloadTooLarge(f"upload larger than {limit} bytes")
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


async def _parse_form(request: Request, settings: Settings) -> FormData:
    if media_type(request) != "multipart/form-data":
        raise UnsupportedMediaType("expected Content-Type: multipart/form-data")
    limit = settings.max_upload_bytes
    max_body = limit + allowance(settings)
    length = declared_length(request)
    if length is not None and length > max_body:
        raise PayloadTooLarge(f"upload larger than {limit} bytes")
    most = settings.max_files_per_upload
    parser = MultiPartParser(
        request.headers,
        _bounded(request.stream(), max_body, limit),
        max_files=most,
        max_fields=6,
        max_part_size=FIELD_BYTES,
    )
    try:
        return await parser.parse()
    except MultiPartException as exc:
        # The parser stops at the first file part past `most` (the rest is not read).
        if exc.message.startswith("Too many files"):
            raise Unprocessable(
                f"more than {most} files in one upload (RELAY_MAX_FILES_PER_UPLOAD): send "
                "them in several requests; nothing was stored",
                error_type="too_many_files",
            ) from exc
        raise BadRequest(f"invalid multipart body: {exc.message}") from exc


def _single(form: FormData, name: str) -> Any:
    values = form.getlist(name)
    if len(values) > 1:
        raise Unprocessable(f"part {name!r} given more than once")
    return values[0] if values else None


@tracing.server("POST /api/v1/documents", status_of)
async def upload_document(request: Request) -> Response:
    """Store each uploaded file (one or several ``file`` parts, at most
    ``RELAY_MAX_FILES_PER_UPLOAD``) as a queued document of a batch (created if new): 201, the
    document, or ``{"documents": [...]}`` in the parts' order when there are several. All of
    them are made, in one script run, or none.

    Authenticated and counted against the account's upload rate before the body is read, in
    one round trip that also holds the body's declared size on the account's pending-bytes
    total (``relay.api.access.admit_write``); a request of several files then counts one a file
    (``relay.api.access.weigh_write``, all or none). The files' bytes together count against
    the account's pending-bytes quota and ``RELAY_MAX_UPLOAD_BYTES``
    (``relay.state.store.AsyncStore.upload_many``). With an ``Idempotency-Key`` the documents an
    earlier upload of the same files with that key made are answered instead, as they are now:
    a client may retry an upload whose answer it lost, or that was answered 503; the key with
    other files is 409 ``idempotency_key_reused``. Traced (``relay.tracing``): the request's
    span is kept with the documents."""
    st = state(request)
    limit = st.settings.max_upload_bytes
    idempotency_key = _idempotency_key(request)
    hold = _hold(request, st.store.blobs.kind, limit, allowance(st.settings))
    admitted = await admit_write(request, UPLOADS, hold)
    try:
        form = await _parse_form(request, st.settings)
        try:
            unknown = sorted(set(form.keys()) - _PARTS)
            if unknown:
                raise Unprocessable(f"unexpected form part(s): {', '.join(unknown)[:200]}")
            parts = _file_parts(form, limit)
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
            files = []
            for upload in parts:
                filename = clean_filename(upload.filename)
                content = await upload.read()
                files.append(NewFile(filename, content_type_of(upload, filename), content))
        finally:
            await form.close()
        _check_sizes(files, limit)
        admitted = await weigh_write(request, admitted, UPLOADS, len(files))
        ref = await st.store.locate(admitted.account, batch_name)
    except BaseException:
        # Refused before the store took the hold over: it goes back (a crash here leaves the
        # total high, which the next recount at the quota's edge corrects).
        await st.resources.release_hold(admitted.account, admitted.held)
        raise
    docs = await st.store.upload_many(
        ref,
        files,
        held=admitted.held,
        admitted=admitted.within_quota,
        idempotency_key=idempotency_key,
        metadata=metadata,
        batch_metadata=batch_metadata,
        trace=tracing.traceparent(),
    )
    tracing.annotate(
        {
            "relay.account": ref.account,
            "relay.batch": ref.name,
            "relay.document.id": docs[0].id,
            "relay.documents": len(docs),
        }
    )
    what = f"upload {docs[0].id}" + (f" and {len(docs) - 1} more" if len(docs) > 1 else "")
    await st.resources.replicated(what, ref.shard)
    if len(docs) == 1:
        return json_response(
            docs[0].to_json(),
            201,
            headers={"Location": f"/api/v1/documents/{docs[0].id}", **admitted.headers},
        )
    body: UploadedDocumentsJSON = {"documents": [doc.to_json() for doc in docs]}
    return json_response(body, 201, headers=admitted.headers)


def _file_parts(form: FormData, limit: int) -> list[UploadFile]:
    """The form's ``file`` parts, in order: at least one, each a file within ``limit``."""
    parts = form.getlist("file")
    if not parts or not all(isinstance(p, UploadFile) for p in parts):
        raise Unprocessable("part 'file' is required and must be a file (with a filename)")
    files = [p for p in parts if isinstance(p, UploadFile)]
    if any(f.size is not None and f.size > limit for f in files):
        raise PayloadTooLarge(f"upload larger than {limit} bytes")
    return files


def _check_sizes(files: list[NewFile], limit: int) -> None:
    """413 unless every file, and all of them together, is within ``limit``."""
    total = sum(len(f.content) for f in files)
    if total > limit:
        what = "upload" if len(files) == 1 else f"the {len(files)} files together"
        raise PayloadTooLarge(f"{what} larger than {limit} bytes")


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


def _hold(request: Request, blob_kind: str, limit: int, extra: int) -> int:
    """What an upload holds on the account's pending total before its body is read: the
    body's declared size, at most the limit (the files are part of the body, and together
    larger is refused). 0 when nothing is charged (blobs outside Redis), when the body has no
    declared size (chunked) or one that is refused anyway (413, past ``limit + extra``): such
    an upload reserves its exact bytes after reading them, one round trip more."""
    try:
        length = declared_length(request)
    except BadRequest:
        return 0  # answered 400 once the request is authenticated and counted, as before
    if blob_kind != "redis" or length is None or length > limit + extra:
        return 0
    return min(length, limit)


async def get_document(request: Request) -> Response:
    """The document (rate-limited status endpoint; another account's is a 404)."""

    async def render(account: str, doc: Document | None) -> Any:
        if doc is None:
            raise NotFound("no such document")
        return doc.to_json()

    return await serve_status(request, DocumentQuery(request.path_params["id"]), render)
