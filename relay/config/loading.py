"""Settings read from the environment and ``.env`` (:func:`load_settings`), checked as a whole
(topology, blob store, tracing), and the documents generated from the declarations
(``.env.example``, ``docs/settings.md``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dotenv.parser import parse_stream

from relay.config.settings import _FIELDS, Settings
from relay.config.values import (
    OTEL_ENDPOINTS,
    OTEL_PREFIX,
    PREFIX,
)
from relay.exceptions import ConfigError

_BY_ENV = {PREFIX + f.name.upper(): f for f in _FIELDS}
# Settings renamed so that a name keeps one meaning ("batch" is a customer's batch of
# documents); the old names are still read, the new one wins when both are set.
_RENAMED = {
    "RELAY_DELIVERY_BATCH": "RELAY_DELIVERY_CLAIM_SIZE",
    "RELAY_PURGE_BATCH": "RELAY_PURGE_STEPS",
}


def read_dotenv(path: Path) -> dict[str, str]:
    """A ``.env`` file's ``KEY=VALUE`` bindings, parsed by python-dotenv (quotes, escapes,
    ``export``, comments, multi-line values), taken literally (no ``${VAR}`` expansion). A
    line that does not parse, or a key without ``=``, stops the process with its line."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    with path.open(encoding="utf-8") as stream:
        for binding in parse_stream(stream):
            where = f"{path}:{binding.original.line}"
            if binding.error:
                raise ConfigError(f"{where}: expected KEY=VALUE")
            if binding.key is None:  # a comment or a blank line
                continue
            if binding.value is None:
                raise ConfigError(f"{where}: expected KEY=VALUE, got {binding.key!r} alone")
            values[binding.key] = binding.value
    return values


def load_settings(
    environ: Mapping[str, str] | None = None,
    dotenv: Path | None = Path(".env"),
    **overrides: Any,
) -> Settings:
    """Build the settings: defaults < ``.env`` < environment < ``overrides``.

    Raises :class:`ConfigError` naming the variable for an unknown ``RELAY_`` name or a
    value that does not parse.
    """
    env = dict(os.environ) if environ is None else dict(environ)
    merged = read_dotenv(dotenv) if dotenv is not None else {}
    merged.update(env)
    for old, new in _RENAMED.items():
        if old in merged:
            merged.setdefault(new, merged.pop(old))
    unknown = sorted(k for k in merged if k.startswith(PREFIX) and k not in _BY_ENV)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(unknown)} (see .env.example)")
    values: dict[str, Any] = {}
    for env_name, f in _BY_ENV.items():
        raw = merged.get(env_name, f.default)
        try:
            values[f.name] = f.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{env_name}={raw!r}: {exc}") from exc
    values["otel"] = tuple(sorted((k, v) for k, v in merged.items() if k.startswith(OTEL_PREFIX)))
    bad = set(overrides) - set(values)
    if bad:
        raise ConfigError(f"unknown override(s): {sorted(bad)}")
    values.update(overrides)
    _check_topology(values)
    _check_blobs(values)
    settings = Settings(**values)
    _check_otel(settings)
    return settings


def _check_topology(values: Mapping[str, Any]) -> None:
    """The Redis settings that cannot go together."""
    if values["redis_cluster_nodes"] and values["redis_sentinels"]:
        raise ConfigError(
            "RELAY_REDIS_CLUSTER_NODES and RELAY_REDIS_SENTINELS are exclusive: the state lives"
            " on a Cluster or on a primary the Sentinels name, not both"
        )
    if values["redis_cluster_nodes"] and not values["queue_redis_url"]:
        raise ConfigError(
            "RELAY_REDIS_CLUSTER_NODES needs RELAY_QUEUE_REDIS_URL: RQ's queues cannot live on"
            " a Cluster (their keys and transactions span slots); give them a small Redis"
        )


def _check_blobs(values: Mapping[str, Any]) -> None:
    """RELAY_BLOB_URL and its older spelling RELAY_BLOB_DIR: one directory at most, and the
    S3 credentials given in pairs."""
    url, directory = values["blob_url"], values["blob_dir"]
    if url.kind == "dir" and directory and Path(directory) != Path(url.directory):
        raise ConfigError(
            f"RELAY_BLOB_URL={url.text!r} and RELAY_BLOB_DIR={directory!r} name two directories:"
            " keep one (RELAY_BLOB_DIR is the older spelling of RELAY_BLOB_URL=file:///path)"
        )
    if bool(values["s3_access_key_id"]) != bool(values["s3_secret_access_key"]):
        raise ConfigError(
            "RELAY_S3_ACCESS_KEY_ID and RELAY_S3_SECRET_ACCESS_KEY go together (or leave both"
            " empty for the SDK's own credentials)"
        )


def _check_otel(settings: Settings) -> None:
    """The OTEL_* values relay's tracing cannot work with, refused at start rather than met
    at the first export: relay exports traces over OTLP/HTTP (protobuf) only."""
    if not settings.tracing:
        return
    for name in OTEL_ENDPOINTS:
        url = settings.otel_value(name)
        if url and not url.lower().startswith(("http://", "https://")):
            raise ConfigError(f"{name}={url!r}: expected an http:// or https:// URL")
    exporter = settings.otel_value("OTEL_TRACES_EXPORTER").lower()
    if exporter not in ("", "otlp"):
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={exporter!r}: relay exports traces with otlp only (or none)"
        )
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = settings.otel_value(name)
        if protocol:
            if protocol != "http/protobuf":
                raise ConfigError(
                    f"{name}={protocol!r}: relay exports traces over http/protobuf only"
                )
            break  # the traces' own protocol decides over the general one


def export_otel(settings: Settings) -> None:
    """Put the ``OTEL_*`` variables that came from ``.env`` into this process's environment,
    where the OpenTelemetry SDK reads them (it reads no file); one already there stays."""
    for name, value in settings.otel:
        os.environ.setdefault(name, value)


def env_example() -> str:
    """The text of ``.env.example``: every setting, its default, one line of meaning."""
    lines = ["# relay configuration: every RELAY_ variable, its default and meaning.", ""]
    for f in _FIELDS:
        lines.append(f"# {f.doc}")
        lines.append(f"{PREFIX}{f.name.upper()}={f.default}")
    return "\n".join(lines) + "\n"


def settings_doc() -> str:
    """The text of ``docs/settings.md``: every setting as a table row (variable, default,
    meaning), from the same fields as ``.env.example``."""
    lines = [
        "# Settings",
        "",
        "Every `RELAY_*` variable, read from the environment and `.env` at start (an unknown",
        "one is an error). Generated from `relay.config.Settings` (`relay config docs`), as",
        "`.env.example` is (`relay config example`); a test keeps the three the same.",
        "Durations take `30d`, `12h`, `15m`, `4s` or a number of seconds.",
        "",
        "| variable | default | meaning |",
        "| --- | --- | --- |",
    ]
    for f in _FIELDS:
        default = f"`{f.default}`" if f.default else "(empty)"
        doc = f.doc.replace("|", "\\|")
        lines.append(f"| `{PREFIX}{f.name.upper()}` | {default} | {doc} |")
    return "\n".join([*lines, *_OTEL_DOC]) + "\n"


# The OpenTelemetry SDK's variables relay's tracing reads or documents (docs/deploy.md,
# "Tracing"); the SDK's own documentation has the rest.
_OTEL_DOC = (
    "",
    "## Tracing: OpenTelemetry's own variables",
    "",
    "Traces are configured by the OpenTelemetry SDK's `OTEL_*` variables, not `RELAY_*` ones",
    '(docs/deploy.md, "Tracing"). relay reads them from the environment and `.env` (the',
    "environment wins) to decide whether to trace and refuses at start what it cannot export",
    "with; the SDK reads them itself. With no endpoint set, tracing is off and costs nothing.",
    "",
    "| variable | default | meaning |",
    "| --- | --- | --- |",
    "| `OTEL_EXPORTER_OTLP_ENDPOINT` | (empty: off) | Base URL of an OTLP/HTTP collector"
    " (`/v1/traces` is appended); setting it turns tracing on |",
    "| `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | (empty) | The full URL for traces, instead of"
    " the one above (also turns tracing on) |",
    "| `OTEL_SERVICE_NAME` | `relay` | The resource's `service.name`; each process also"
    " carries `relay.process` (api, worker, detector) |",
    "| `OTEL_RESOURCE_ATTRIBUTES` | (empty) | More resource attributes, `key=value,...` |",
    "| `OTEL_TRACES_SAMPLER` | `parentbased_always_on` | Which traces are kept:"
    " `parentbased_traceidratio` with `OTEL_TRACES_SAMPLER_ARG=0.1` keeps a tenth of relay's"
    " own and follows a client's sampled `traceparent`; `traceidratio` ignores the client's"
    " decision |",
    "| `OTEL_TRACES_SAMPLER_ARG` | (empty) | The ratio of the `*traceidratio` samplers |",
    "| `OTEL_BSP_SCHEDULE_DELAY` | `5000` | Milliseconds between two exports of a process |",
    "| `OTEL_BSP_MAX_QUEUE_SIZE` | `2048` | Spans a process holds for export; past it new"
    " spans are dropped (a slow collector never slows relay) |",
    "| `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` | `512` | Spans per export request |",
    "| `OTEL_BSP_EXPORT_TIMEOUT` | `30000` | Milliseconds an export may take, also the one at"
    " a process's stop: keep it below the stop timeout of the supervisor |",
    "| `OTEL_EXPORTER_OTLP_HEADERS` | (empty) | Headers of every export (`key=value,...`),"
    " e.g. the collector's credentials; never printed |",
    "| `OTEL_EXPORTER_OTLP_TIMEOUT` | `10` | Seconds one export request may take |",
    "| `OTEL_EXPORTER_OTLP_COMPRESSION` | (empty) | `gzip` to compress exports |",
    "| `OTEL_EXPORTER_OTLP_CERTIFICATE` | (empty) | CA bundle to verify an https collector"
    " (`_CLIENT_CERTIFICATE`, `_CLIENT_KEY`: mutual TLS) |",
    "| `OTEL_EXPORTER_OTLP_PROTOCOL` | `http/protobuf` | The only protocol relay exports"
    " with; another is refused at start |",
    "| `OTEL_TRACES_EXPORTER` | `otlp` | `none` turns tracing off; another is refused at start |",
    "| `OTEL_SDK_DISABLED` | `false` | `true` turns tracing off |",
)


def explicitly_set(
    environ: Mapping[str, str] | None = None, dotenv: Path | None = Path(".env")
) -> set[str]:
    """The ``RELAY_`` names set in the environment or ``.env`` (not left to defaults)."""
    env = os.environ if environ is None else environ
    names = {k for k in env if k.startswith(PREFIX)}
    return names | (set(read_dotenv(dotenv)) if dotenv is not None else set())
