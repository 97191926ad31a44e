"""Settings: read once at the edge from ``RELAY_*`` environment variables and ``.env``.

``os.environ`` is read here and nowhere else. Every setting is declared once, as a field of
:class:`Settings` with its type, its default, its parser and one line of meaning
(:func:`setting`); ``.env.example`` and ``docs/settings.md`` are generated from those fields
(``relay config example``, ``relay config docs``), so nothing can drift. An unknown
``RELAY_`` variable is an error at start, not silently ignored.

One family of foreign variables is read too: OpenTelemetry's own ``OTEL_*``
(:attr:`Settings.otel`), which turn tracing on and configure it (``relay.tracing``,
docs/deploy.md, "Tracing"). relay checks the few that decide whether and how it exports; the
SDK reads the rest itself from the process environment, where :func:`export_otel` puts those
that came from ``.env`` (the one documented exception to "read here and nowhere else").

The AWS SDK reads its own too when ``RELAY_BLOB_URL`` is ``s3://`` (``relay.state.s3``):
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``,
``AWS_CA_BUNDLE`` and its config files, for what the ``RELAY_S3_*`` settings leave empty; relay
neither reads nor checks them, and they must be in the process environment (not ``.env``).
"""

from relay.config.loading import (
    env_example,
    explicitly_set,
    export_otel,
    load_settings,
    read_dotenv,
    settings_doc,
)
from relay.config.settings import Settings
from relay.config.values import (
    DEFAULT_MAX_FILES_PER_UPLOAD,
    OCR_PROVIDERS,
    BlobUrl,
    RateLimit,
    Secret,
)

__all__ = [
    "DEFAULT_MAX_FILES_PER_UPLOAD",
    "OCR_PROVIDERS",
    "BlobUrl",
    "RateLimit",
    "Secret",
    "Settings",
    "env_example",
    "explicitly_set",
    "export_otel",
    "load_settings",
    "read_dotenv",
    "settings_doc",
]
