"""Settings: defaults, .env, environment precedence, unknown names, bad values, secrets."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from relay.config import RateLimit, Settings, env_example, load_settings, read_dotenv, settings_doc
from relay.exceptions import ConfigError
from relay.state.job_queues import document_job_timeout
from relay.timefmt import parse_duration

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_match_the_spec() -> None:
    s = load_settings({}, dotenv=None)
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert s.retry_schedule == (5, 300, 1800, 7200, 18000, 36000, 36000)
    assert s.delivery_timeout == 15
    assert s.status_rate_limit == RateLimit(120, 60_000)
    assert s.allow_http_targets is False and s.allow_private_targets is False
    assert (s.extract_timeout, s.extract_memory, s.max_result_bytes) == (60, 2 << 30, 16 << 20)
    assert s.extract_max_depth == 64


def test_the_document_job_outlives_the_extraction_deadline() -> None:
    # The job's RQ timeout is always a minute past the longest wall-clock time an extraction
    # may take (the backstop of a document of RELAY_MAX_PAGES pages: 4 x (60 + 500 x 15) s
    # of CPU budget by default) and past lease_seconds x 10, so the job records
    # extraction_timeout, not RQ.
    assert document_job_timeout(load_settings({}, dotenv=None)) == 30_300
    short = {"RELAY_MAX_PAGES": "10", "RELAY_EXTRACT_PAGE_SECONDS": "0"}
    assert document_job_timeout(load_settings(short, dotenv=None)) == 660
    long = load_settings({**short, "RELAY_EXTRACT_TIMEOUT": "3600"}, dotenv=None)
    assert document_job_timeout(long) == 14_460
    tight = {**short, "RELAY_EXTRACT_TIMEOUT": "3600", "RELAY_EXTRACT_WALL_FACTOR": "1"}
    assert document_job_timeout(load_settings(tight, dotenv=None)) == 3660


@pytest.mark.parametrize("factor", ["0.5", "0", "-1", "nan", "inf"])
def test_the_wall_clock_backstop_is_never_below_the_cpu_budget(factor: str) -> None:
    with pytest.raises(ConfigError, match="RELAY_EXTRACT_WALL_FACTOR"):
        load_settings({"RELAY_EXTRACT_WALL_FACTOR": factor}, dotenv=None)


def test_env_beats_dotenv(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("# comment\nRELAY_DELIVERY_TIMEOUT=3\nRELAY_PORT='9000'\n")
    s = load_settings({"RELAY_DELIVERY_TIMEOUT": "4"}, dotenv=dotenv)
    assert s.delivery_timeout == 4 and s.port == 9000


def test_dotenv_reads_quotes_export_comments_and_takes_values_literally(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "export RELAY_PORT=9001  # the API's port\n"
        'RELAY_LOG_FORMAT="json"\n'
        "RELAY_PUBLIC_BASE_URL='https://relay.example/${NOT_EXPANDED}'\n"
    )
    assert read_dotenv(dotenv) == {
        "RELAY_PORT": "9001",
        "RELAY_LOG_FORMAT": "json",
        "RELAY_PUBLIC_BASE_URL": "https://relay.example/${NOT_EXPANDED}",
    }


@pytest.mark.parametrize("line", ["RELAY_PORT", "this is not a binding"])
def test_a_dotenv_line_that_is_not_a_binding_names_its_line(tmp_path: Path, line: str) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text(f"RELAY_PORT=9001\n{line}\n")
    with pytest.raises(ConfigError, match=r"\.env:2: expected KEY=VALUE"):
        load_settings({}, dotenv=dotenv)


def test_unknown_setting_is_an_error() -> None:
    with pytest.raises(ConfigError, match="RELAY_DELIVERY_TIMOUT"):
        load_settings({"RELAY_DELIVERY_TIMOUT": "3"}, dotenv=None)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RELAY_PORT", "-1"),
        ("RELAY_RETRY_SCHEDULE", "5,x"),
        ("RELAY_STATUS_RATE_LIMIT", "120/fortnight"),
        ("RELAY_ALLOW_HTTP_TARGETS", "maybe"),
        ("RELAY_RETENTION", "0d"),
        ("RELAY_RETENTION", "3w"),
        ("RELAY_RETENTION", "-4s"),
        ("RELAY_MAX_STORED_ATTEMPTS", "1"),
        ("RELAY_PURGE_STEPS", "0"),
        ("RELAY_WRITE_LEASE_SLOTS", "0"),
        ("RELAY_WRITE_LEASE_SLOTS", "65"),
        ("RELAY_WRITE_LEASE_MS", "0"),
        ("RELAY_WRITE_LEASE_MS", "10001"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load_settings({name: value}, dotenv=None)


def test_secret_never_prints() -> None:
    s = load_settings({"RELAY_ENCRYPTION_KEY": "super-secret-value"}, dotenv=None)
    assert "super-secret-value" not in repr(s) and "super-secret-value" not in str(s)
    assert s.encryption_key.reveal() == "super-secret-value"


def test_to_env_round_trips() -> None:
    s = load_settings({"RELAY_RETRY_SCHEDULE": "1,2.5", "RELAY_ENCRYPTION_KEY": "k"}, dotenv=None)
    assert load_settings(s.to_env(), dotenv=None) == s


def test_env_example_lists_every_setting() -> None:
    assert (ROOT / ".env.example").read_text() == env_example()


def test_the_settings_doc_is_generated_from_the_same_fields() -> None:
    """docs/settings.md, .env.example and Settings come from one declaration per setting."""
    doc = (ROOT / "docs" / "settings.md").read_text()
    assert doc == settings_doc(), "regenerate: relay config docs > docs/settings.md"
    example = env_example()
    for f in fields(Settings):
        if f.name == "otel":  # OpenTelemetry's own variables, documented in a table of their own
            continue
        name = "RELAY_" + f.name.upper()
        default, _, meaning = f.metadata["setting"]
        assert f"{name}={default}\n" in example
        assert f"| `{name}` |" in doc and meaning.replace("|", "\\|") in doc


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("30d", 2_592_000), ("12h", 43_200), ("15m", 900), ("4s", 4), ("2.5", 2.5), (" 1D ", 86_400)],
)
def test_retention_takes_s_m_h_d_suffixes(raw: str, seconds: float) -> None:
    assert load_settings({"RELAY_RETENTION": raw}, dotenv=None).retention == seconds


def test_retention_purge_and_attempt_defaults() -> None:
    s = load_settings({}, dotenv=None)
    assert s.retention == 30 * 86_400
    assert s.purge_steps == 20 and s.max_stored_attempts == 20


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 2_592_000.0),
        ("12h", 43_200.0),
        ("15m", 900.0),
        ("4s", 4.0),
        ("90", 90.0),
        ("0.5s", 0.5),
        (" 2H ", 7_200.0),
    ],
)
def test_one_duration_parser_reads_settings_and_commands(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert load_settings({"RELAY_RETENTION": text}, dotenv=None).retention == seconds


@pytest.mark.parametrize("text", ["", "0", "0s", "-5m", "5w", "m", "1e3", "5 minutes"])
def test_a_duration_that_does_not_parse_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(text)


def test_a_renamed_setting_is_still_read_under_its_old_name() -> None:
    old = load_settings({"RELAY_DELIVERY_BATCH": "8", "RELAY_PURGE_BATCH": "3"}, dotenv=None)
    assert (old.delivery_claim_size, old.purge_steps) == (8, 3)
    both = {"RELAY_PURGE_BATCH": "3", "RELAY_PURGE_STEPS": "5"}
    assert load_settings(both, dotenv=None).purge_steps == 5  # the new name wins


def test_a_cluster_needs_a_queue_redis_and_excludes_sentinels() -> None:
    nodes = {"RELAY_REDIS_CLUSTER_NODES": "127.0.0.1:7000,[::1]:7001"}
    with pytest.raises(ConfigError, match="RELAY_QUEUE_REDIS_URL"):
        load_settings(nodes, dotenv=None)
    queue = {"RELAY_QUEUE_REDIS_URL": "redis://127.0.0.1:6390/0"}
    with pytest.raises(ConfigError, match="RELAY_REDIS_SENTINELS"):
        load_settings({**nodes, **queue, "RELAY_REDIS_SENTINELS": "127.0.0.1:26379"}, dotenv=None)
    settings = load_settings({**nodes, **queue}, dotenv=None)
    assert settings.redis_cluster_nodes == (("127.0.0.1", 7000), ("::1", 7001))
    assert load_settings(settings.to_env(), dotenv=None) == settings
    with pytest.raises(ConfigError, match="RELAY_REDIS_CLUSTER_NODES"):
        load_settings({"RELAY_REDIS_CLUSTER_NODES": "nowhere"}, dotenv=None)


def test_the_blob_url_names_one_store_and_blob_dir_is_its_older_spelling() -> None:
    def load(**env: str) -> Settings:
        return load_settings({f"RELAY_{k.upper()}": v for k, v in env.items()}, dotenv=None)

    assert (load().blob_kind, load().blob_directory) == ("redis", "")
    assert load(blob_dir="/srv/b").blob_kind == "dir"
    same = load(blob_url="file:///srv/b", blob_dir="/srv/b/")
    assert (same.blob_kind, same.blob_directory) == ("dir", "/srv/b")
    s3 = load(blob_url="s3://acme-blobs/prod/relay/", blob_dir="/srv/old")
    assert (s3.blob_kind, s3.blob_url.bucket, s3.blob_url.prefix) == (
        "s3",
        "acme-blobs",
        "prod/relay/",
    )
    assert s3.blob_directory == "/srv/old"  # still read and emptied: bytes written before
    assert load(blob_url="s3://acme-blobs").blob_url.prefix == ""
    assert load(blob_url="redis:", blob_dir="/srv/old").blob_kind == "redis"
    keyed = load(
        blob_url="s3://acme-blobs/p", s3_access_key_id="AKIA1", s3_secret_access_key="hush"
    )
    assert "hush" not in repr(keyed) and load_settings(keyed.to_env(), dotenv=None) == keyed
    for bad in ("s3://", "s3://Bad_Bucket/x", "file://relative", "ftp://x", "redis", "dir"):
        with pytest.raises(ConfigError, match="RELAY_BLOB_URL"):
            load(blob_url=bad)
    with pytest.raises(ConfigError, match="two directories"):
        load(blob_url="file:///srv/a", blob_dir="/srv/b")
    with pytest.raises(ConfigError, match="RELAY_S3_SECRET_ACCESS_KEY"):
        load(blob_url="s3://acme-blobs", s3_access_key_id="AKIA1")
