"""Schemathesis over the whole OpenAPI document, every phase and every check, against the real
app (uvicorn) and a real Redis.

Phases: examples, coverage and fuzzing per operation (``test_every_operation_conforms``),
then stateful sequences that follow the links schemathesis infers between operations
(``test_stateful_sequences_conform``). Checks: every check schemathesis has, asserted by
``test_every_check_is_enabled`` so that none is quietly left out; ``use_after_free``,
``negative_data_rejection`` and ``positive_data_acceptance`` run inside wrappers that waive
one case each and nothing else (a DELETE the document marks ``x-soft-delete``; a multipart
upload that was valid as the server received it but that schemathesis cannot judge because
it holds binary data; valid data refused for one of the two rules JSON Schema cannot state,
checked by the test on what was sent: metadata past its bound in bytes, a page range that
ends before it starts).

The operations are whatever ``relay.api.openapi.document()`` holds when the tests are
collected: an endpoint added to the document is tested without touching this file.

Bounded: at most ``MAX_EXAMPLES`` generated examples per operation and per mode, a deadline
per example and a pytest timeout per test; the stateful run is ``STATEFUL_RUNS`` sequences of
at most ``STATEFUL_STEPS`` calls.

Every run draws a fresh random seed (CI too: each build explores new requests), prints it
in the run's header before the first test (one seed for all pytest-xdist workers:
``tests/support/run_seed.py``), and a failure names it: ``SCHEMATHESIS_SEED=<seed>`` replays
that run's draws (the same seed gives the same requests on the same document).

Each operation gets a fresh app on a flushed Redis, seeded with one batch (the name the
document's examples use) holding one document; requests carry a valid API key. This machine
has no DNS, and a callback host must resolve to a public address: ``public_dns`` answers
every name with a public address (the stdlib resolver is the only stand-in; relay's own
checks run as they are).
"""

from __future__ import annotations

import email
import email.policy
import json
import re
import socket
from collections.abc import Iterator
from typing import Any, ClassVar

import jsonschema_rs
import pytest
import schemathesis
from hypothesis import HealthCheck, seed, settings
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.core.parameters import ParameterLocation
from schemathesis.core.transport import Response
from schemathesis.openapi.checks import RejectedPositiveData, UseAfterFree
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    positive_data_acceptance,
    use_after_free,
)
from schemathesis.transport.serialization import contains_binary

from relay.api.openapi import SOFT_DELETE, STILL_READABLE, document
from relay.api.openapi_parts import EXAMPLE_BATCH
from relay.config import RateLimit
from relay.state.metadata import DEFAULT_MAX_BYTES, canonical
from tests.support.api_fixtures import Api, ApiFactory, api_factory_fixture  # noqa: F401
from tests.support.run_seed import replay_hint, run_seed

SEED = run_seed()
REPLAY = replay_hint(SEED)
MAX_EXAMPLES = 10
STATEFUL_RUNS = 15
STATEFUL_STEPS = 8
# No single answer may take longer (a generous bound on 2 shared cores).
MAX_RESPONSE_SECONDS = 5.0
# Any public address: no delivery is ever sent to it (no worker runs in these tests); a test
# send (POST .../webhook/test) tries to connect and reports the failure.
PUBLIC_ADDRESS = "93.184.215.14"


@schemathesis.check
def use_after_free_unless_soft_delete(
    ctx: schemathesis.CheckContext, response: Response, case: schemathesis.Case[Any]
) -> bool | None:
    """schemathesis's ``use_after_free``, except after a DELETE the document marks as a soft
    delete (``x-soft-delete``: the resource stays readable by design, as its description
    says) and for a read of a path the DELETE names as still readable (``x-still-readable``:
    a webhook's removal leaves the batch's deliveries listed). A read after any other DELETE
    that still answers 2xx fails as before."""
    try:
        return use_after_free(ctx, response, case)
    except UseAfterFree as failure:
        freed_by = next(
            (c for c in ctx.internals.find_all_cases() if c.id == failure.deleted_case_id), None
        )
        if freed_by is not None:
            raw = freed_by.operation.definition.raw
            if raw.get(SOFT_DELETE) or case.operation.path in raw.get(STILL_READABLE, ()):
                return None
        raise


def _form_as_sent(response: Response) -> dict[str, Any] | None:
    """The fields of the multipart body as the server received them (the file parts of a
    name as a list of empty strings: any bytes are a valid file; a JSON part, such as
    ``metadata``, as the value its text holds); None unless one part per name (files aside),
    each readable."""
    request = response.request
    raw_type = request.headers.get("Content-Type", "")
    content_type = raw_type.decode("latin-1") if isinstance(raw_type, bytes) else raw_type
    body = request.body
    if not content_type.startswith("multipart/form-data") or not isinstance(body, bytes):
        return None
    message = email.message_from_bytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body, policy=email.policy.HTTP
    )
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            return None
        if part.get_filename() is not None:
            files = fields.setdefault(name, [])
            if not isinstance(files, list):
                return None
            files.append("")
            continue
        if name in fields:
            return None
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes) and part.get_content_type() == "application/json":
            try:
                fields[name] = json.loads(payload)
            except ValueError:
                return None
        elif isinstance(payload, bytes):
            fields[name] = payload.decode("utf-8", "replace")
        else:
            return None
    return fields


def _valid_as_sent(response: Response, case: schemathesis.Case[Any]) -> bool:
    """Whether a multipart upload holding binary data was valid as the server received it.

    schemathesis cannot judge a body holding binary data: it counts it as invalid when it
    re-validates a body changed after generation (the stateful phase fills it from earlier
    responses), and cannot tell that a field generated as ``69`` or ``null`` arrives as the
    valid text ``"69"`` or ``"null"``. A valid upload is then reported as negative data the
    server accepted.
    """
    meta = case.meta
    if meta is None or not contains_binary(case.body):
        return False
    if any(
        info.mode.is_negative
        for location, info in meta.components.items()
        if location != ParameterLocation.BODY
    ):
        return False
    sent = _form_as_sent(response)
    if sent is None:
        return False
    doc = document()
    operation = doc["paths"][case.operation.path][case.method.lower()]
    body_schema = operation["requestBody"]["content"]["multipart/form-data"]["schema"]
    validator = jsonschema_rs.validator_for({**body_schema, "components": doc["components"]})
    return validator.is_valid(sent)


@schemathesis.check
def negative_data_rejection_reading_binary(
    ctx: schemathesis.CheckContext, response: Response, case: schemathesis.Case[Any]
) -> bool | None:
    """schemathesis's ``negative_data_rejection``, except for a multipart body counted as
    negative only because it holds binary data (``_valid_as_sent``)."""
    try:
        return negative_data_rejection(ctx, response, case)
    except AcceptedNegativeData:
        if _valid_as_sent(response, case):
            return None
        raise


def _error(response: Response) -> dict[str, Any]:
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return {}
    return error if isinstance(error, dict) else {}


def _over_metadata_bytes(response: Response) -> bool:
    """Whether the server refused an upload 422 ``invalid_metadata`` for a metadata part
    that is indeed longer than RELAY_METADATA_MAX_BYTES (the default the tests run with) as
    compact JSON, measured here on what was sent."""
    error = _error(response)
    if error.get("type") != "invalid_metadata" or "bytes as compact JSON" not in error["message"]:
        return False
    sent = _form_as_sent(response) or {}
    return any(
        isinstance(value, dict)
        and len(canonical(value).encode("utf-8", "surrogatepass")) > DEFAULT_MAX_BYTES
        for name, value in sent.items()
        if name in ("metadata", "batch_metadata")
    )


def _reversed_page_range(response: Response, case: schemathesis.Case[Any]) -> bool:
    """Whether the server refused a process call 422 ``invalid_pages`` for a range that
    indeed ends before it starts (``3-1``), read here from what was sent."""
    error = _error(response)
    if error.get("type") != "invalid_pages" or "ends before it starts" not in error["message"]:
        return False
    pages = case.body.get("pages") if isinstance(case.body, dict) else None
    return isinstance(pages, str) and any(
        int(a) > int(b) for a, b in re.findall(r"([0-9]+) *- *([0-9]+)", pages)
    )


@schemathesis.check
def positive_data_acceptance_within_what_schemas_say(
    ctx: schemathesis.CheckContext, response: Response, case: schemathesis.Case[Any]
) -> bool | None:
    """schemathesis's ``positive_data_acceptance``, except for the two rules JSON Schema
    cannot state (the schemas' descriptions state them), so that schema-valid data may
    break them: an upload whose metadata passes RELAY_METADATA_MAX_BYTES as compact JSON
    (``_over_metadata_bytes``), a process call whose page range ends before it starts
    (``_reversed_page_range``). Each is checked on what was sent; any other refusal of valid
    data fails as before."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if response.status_code == 422 and (
            _over_metadata_bytes(response) or _reversed_page_range(response, case)
        ):
            return None
        raise


CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "generation": {"mode": "all", "max-examples": MAX_EXAMPLES},
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": True},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": True},
        },
        "checks": {
            "enabled": True,
            "max_response_time": MAX_RESPONSE_SECONDS,
            # Replaced by the two checks above, which run them.
            "use_after_free": {"enabled": False},
            "negative_data_rejection": {"enabled": False},
            "positive_data_acceptance": {"enabled": False},
        },
    }
)
schema = schemathesis.openapi.from_dict(document(), config=CONFIG)


class _SeedInFailures:
    """Adds the seed to the report of every failed test of this module (a section printed
    with the failure), so a red build names the draws to replay."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()  # type: ignore[attr-defined]
        if report.failed and item.nodeid.startswith(__name__.replace(".", "/")):
            report.sections.append(("schemathesis seed", REPLAY))


@pytest.fixture(scope="module", autouse=True)
def seed_in_failures(request: pytest.FixtureRequest) -> Iterator[None]:
    """The seed in the report of any failure of this module (the run's header names it
    before the first test: tests/conftest.py)."""
    plugin = _SeedInFailures()
    request.config.pluginmanager.register(plugin)
    yield
    request.config.pluginmanager.unregister(plugin)


@pytest.fixture(name="public_dns")
def public_dns_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every host name resolves to ``PUBLIC_ADDRESS``; IP literals resolve as they are."""
    real = socket.getaddrinfo

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            socket.inet_pton(socket.AF_INET6 if ":" in str(host) else socket.AF_INET, host)
        except (OSError, TypeError, ValueError):
            return [
                (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (PUBLIC_ADDRESS, port))
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    yield


class _Key:
    """The API key of the test being run (each test has its own app and Redis)."""

    current = ""


@schema.auth(refresh_interval=None)
class ApiKeyAuth:
    """Every request carries the current key, except those that test its absence (schemathesis
    leaves the header out, or in, as a case needs)."""

    def get(self, case: schemathesis.Case[Any], ctx: schemathesis.AuthContext) -> str:
        return _Key.current

    def set(self, case: schemathesis.Case[Any], data: str, ctx: schemathesis.AuthContext) -> None:
        case.headers["Authorization"] = f"Bearer {data}"


@pytest.fixture(name="seeded")
def seeded_fixture(api_factory: ApiFactory, public_dns: None) -> Api:
    # Limits schemathesis cannot reach, so it explores past the first requests (the 429
    # paths have their own tests).
    unreachable = RateLimit(limit=1_000_000, window_ms=60_000)
    api = api_factory(
        status_rate_limit=unreachable,
        account_upload_rate_limit=unreachable,
        account_process_rate_limit=unreachable,
        account_retry_rate_limit=unreachable,
        # The auth checks send requests without a key or with a bad one: many from one address.
        auth_failure_rate_limit=unreachable,
        # Within the deadline of an example: a long poll (GET /events?wait=) is held at most
        # this long, and a test send (to a callback host resolved to PUBLIC_ADDRESS, which
        # nothing answers here) gives up after this long.
        events_max_wait=0.3,
        delivery_timeout=0.5,
    )
    _seed(api)
    return api


def _seed(api: Api) -> None:
    """A flushed Redis holding the one batch of the examples; its owner's key is current."""
    api.flush()
    api.upload_ok("acme", EXAMPLE_BATCH)
    _Key.current = api.key("acme")


def test_every_check_is_enabled() -> None:
    load_all_checks()
    names = set(CHECKS.get_all_names())
    assert {
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
        "positive_data_acceptance",
        "use_after_free",
        "ensure_resource_availability",
        "ignored_auth",
        "unsupported_method",
        "allow_header_conformance",
        "missing_required_header",
    } <= names
    disabled = {n for n in names if not schema.config.checks.get_by_name(name=n).enabled}
    # Each runs inside its replacement.
    assert disabled == {"use_after_free", "negative_data_rejection", "positive_data_acceptance"}
    assert {
        "use_after_free_unless_soft_delete",
        "negative_data_rejection_reading_binary",
        "positive_data_acceptance_within_what_schemas_say",
    } <= names
    assert schema.config.checks.max_response_time.limit == MAX_RESPONSE_SECONDS


@pytest.mark.timeout(120)
@schema.parametrize()
@settings(
    deadline=2000,
    # Generation health, not API conformance: the callback URL pattern's host-length
    # lookahead makes drafts get discarded (the pattern is the contract, so it stays).
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_every_operation_conforms(case: schemathesis.Case[Any], seeded: Api) -> None:
    case.call_and_validate(base_url=seeded.base_url)


@pytest.mark.timeout(120)
def test_stateful_sequences_conform(seeded: Api) -> None:
    base = schema.as_state_machine()

    class Sequences(base):  # type: ignore[misc, valid-type]
        api: ClassVar[Api] = seeded

        def setup(self) -> None:
            # Each sequence starts from the same state. Hypothesis replays a sequence's
            # draws (to shrink, or to report), and which links a step can follow depends on
            # the answers before it: on state left by earlier sequences, a replay diverges
            # from its first run (FlakyStrategyDefinition) instead of reproducing it.
            _seed(self.api)

        def get_call_kwargs(self, case: schemathesis.Case[Any]) -> dict[str, Any]:
            return {"base_url": self.api.base_url}

        def validate_response(
            self, response: Response, case: schemathesis.Case[Any], **kwargs: Any
        ) -> None:
            super().validate_response(response, case, **kwargs)

    seed(SEED)(Sequences).run(
        settings=settings(
            max_examples=STATEFUL_RUNS,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
    )
